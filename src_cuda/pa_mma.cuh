// portattn matrix-unit tiles: one interface for the kernels over NVIDIA mma.sync (32-lane warps) and AMD MFMA
// (64-lane waves: gfx90a, and NVIDIA under the wave64 emulation). Like pa_prelude.cuh, this is the only place that
// knows the vendor; kernel bodies use the names below.
//
// One MMA computes a PA_MMA_M x PA_MMA_N tile C += A (PA_MMA_M x PA_MMA_K) * B (PA_MMA_K x PA_MMA_N) with float
// accumulation. Inputs (pa_elem in memory) are float16 or bfloat16 (PA_BF16 = 1), or float32 (PA_F32 = 1: three
// TF32 products on NVIDIA, native fp32 MFMA on AMD). Per lane:
//   pa_mma_a   A fragment                 pa_mma_load_a(a, tile, ld): A from a row-major [m][k] shared tile
//   pa_mma_b   B fragments of PA_MMA_B_TILES adjacent n tiles
//                                         pa_mma_load_b_nk: from a [n][k] tile (K for Q·K^T)
//                                         pa_mma_load_b_kn: from a [k][n] tile (V for P·V)
//   pa_mma_c   C fragment, PA_MMA_C_REGS floats: PA_MMA_C_ROWS rows x PA_MMA_C_COLS columns, element
//              rr * PA_MMA_C_COLS + cc at (pa_mma_c_row(rr), pa_mma_c_col(cc)); the lanes holding one row form
//              segments of PA_MMA_ROW_LANES
//   pa_mma(c, a, b, t)                    c += a * (n tile t of b)
//   pa_mma_a_from_c(a, c, k0)             the A fragment of keys k0 .. k0 + PA_MMA_K - 1 from the row of score
//                                         C fragments c (scores become the left operand of P·V in registers)
// 16-bit elements are carried as raw bits (pa_u16).
#pragma once

#include "pa_prelude.cuh"

#ifndef PA_BF16
#define PA_BF16 0
#endif
#ifndef PA_F32
#define PA_F32 0
#endif
#ifndef PA_MMA_WGMMA
#define PA_MMA_WGMMA 0  // 1: Hopper warpgroup MMA (sm_90a, 16-bit inputs) for the tile products below
#endif
typedef unsigned short pa_u16;
#if PA_F32
typedef float pa_elem;
#else
typedef pa_u16 pa_elem;
#endif

// ---- global -> shared copies and 16-bit conversion --------------------------------------------------------------

#if defined(PA_VENDOR_CUDA)
PA_DEVICE unsigned pa_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16-byte global -> shared copy that bypasses registers; `valid == false` writes zeros instead.
PA_DEVICE void pa_async_copy16(void* dst_smem, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(pa_smem_addr(dst_smem)), "l"(src),
                 "r"(valid ? 16 : 0));
}
PA_DEVICE void pa_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N committed groups of this thread are still in flight.
// With the warpgroup MMA the copies are also made visible to its shared-memory operand reads (async proxy).
template <int N>
PA_DEVICE void pa_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#if PA_MMA_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Round two floats to the 16-bit type and pack them, `lo` in the low half.
PA_DEVICE unsigned pa_pack_x2(float lo, float hi) {
    unsigned r;
#if PA_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}
#else
// HIP (64-lane MFMA waves; pa_mfma.cuh has the 16-bit conversions): plain copies, so the loads of the next tile
// are not overlapped with compute.
#include "pa_mfma.cuh"
PA_DEVICE void pa_async_copy16(void* dst_smem, const void* src, bool valid) {
    *static_cast<uint4*>(dst_smem) = valid ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}
PA_DEVICE void pa_async_commit() {}
template <int N>
PA_DEVICE void pa_async_wait() {}

PA_DEVICE unsigned pa_to_16bit(float x) {
#if PA_BF16
    return (unsigned short)pa_mfma_bf16_from_float(x);
#else
    const pa_mfma_f16 h = pa_mfma_f16_from_float(x);
    unsigned short bits;
    __builtin_memcpy(&bits, &h, 2);
    return bits;
#endif
}
PA_DEVICE unsigned pa_pack_x2(float lo, float hi) { return pa_to_16bit(lo) | (pa_to_16bit(hi) << 16); }
#endif

// Store one input-type element (a float rounded to the element type).
PA_DEVICE void pa_store_elem(pa_elem* p, float x) {
#if PA_F32
    *p = x;
#else
    *p = (pa_u16)(pa_pack_x2(x, 0.f) & 0xffffu);
#endif
}
// Store two adjacent elements p[0] = x, p[1] = y (p aligned to two elements).
PA_DEVICE void pa_store_elem2(pa_elem* p, float x, float y) {
#if PA_F32
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
#else
    *reinterpret_cast<unsigned*>(p) = pa_pack_x2(x, y);
#endif
}

#if PA_WARP_SIZE == 32 && defined(PA_VENDOR_CUDA)
// ---- NVIDIA mma.sync: m16n8 tiles, two adjacent n tiles per B fragment ------------------------------------------
// C 16x8 float, 4 registers (g = lane / 4, t = lane % 4): (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
#define PA_MMA_M 16
#define PA_MMA_N 8
#define PA_MMA_B_TILES 2
#define PA_MMA_C_ROWS 2
#define PA_MMA_C_COLS 2
#define PA_MMA_ROW_LANES 4
typedef float pa_mma_c[4];
PA_DEVICE int pa_mma_c_row(int rr) { return pa_lane_id() / 4 + 8 * rr; }
PA_DEVICE int pa_mma_c_col(int cc) { return 2 * (pa_lane_id() % 4) + cc; }

// Four 8x8 matrices of 16-bit elements; lane i gives the address of row i % 8 of matrix i / 8. Register j gets
// matrix j with lane l holding row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (.trans: column instead of row).
PA_DEVICE void pa_ldmatrix_x4(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(pa_smem_addr(smem)));
}
PA_DEVICE void pa_ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(pa_smem_addr(smem)));
}

#if PA_F32
// ---- NVIDIA float32: 3xTF32 on mma.sync m16n8k8 ------------------------------------------------------------------
// Each float x is split into big = tf32(x) and small = tf32(x - big); a product is small*big + big*small + big*big
// (small*small is below float32 rounding). Fragments (g = lane / 4, t = lane % 4):
//   A 16x8: (g, t), (g+8, t), (g, t+4), (g+8, t+4)    B 8x8 (k x n): (k t, n g), (k t+4, n g)
// For P·V the key order inside a k8 step is permuted: k = t holds key 2t and k = t + 4 key 2t + 1, so that the
// score C fragment is the A fragment as it stands; the V fragments are loaded with the same permutation.
#define PA_MMA_K 8
#define PA_MMA_ACC_TRUNCATES 1  // sum P·V tiles outside the unit: its float accumulation truncates
struct pa_mma_a {
    unsigned big[4], small[4];
};
struct pa_mma_b {  // two n tiles: registers 0..1 for n 0..7, 2..3 for n 8..15
    unsigned big[4], small[4];
};

PA_DEVICE unsigned pa_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
PA_DEVICE void pa_tf32_split(float x, unsigned& big, unsigned& small) {
    big = pa_tf32(x);
    const float rest = x - __uint_as_float(big);
    small = pa_tf32(rest == rest ? rest : 0.f);  // x = ±inf: inf - inf would turn the product into NaN
}
template <class F>
PA_DEVICE void pa_mma_split4(F& f, const unsigned (&raw)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) pa_tf32_split(__uint_as_float(raw[i]), f.big[i], f.small[i]);
}

// ldmatrix moves 16-bit pairs, i.e. whole floats: an 8x8 b16 matrix is 8 rows of 4 floats, lane l getting float
// l % 4 of row l / 4.
PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const float* tile, int ld) {
    const int lane = pa_lane_id();
    unsigned raw[4];
    pa_ldmatrix_x4(raw, tile + (lane % 16) * ld + (lane / 16) * 4);
    pa_mma_split4(a, raw);
}
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const float* tile, int ld) {
    const int lane = pa_lane_id();
    unsigned raw[4];
    pa_ldmatrix_x4(raw, tile + (lane % 8 + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 4);
    pa_mma_split4(b, raw);
}
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const float* tile, int ld) {
    const int g = pa_lane_id() / 4, t = pa_lane_id() % 4;
    unsigned raw[4];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
        raw[2 * n] = __float_as_uint(tile[(2 * t) * ld + 8 * n + g]);
        raw[2 * n + 1] = __float_as_uint(tile[(2 * t + 1) * ld + 8 * n + g]);
    }
    pa_mma_split4(b, raw);
}

PA_DEVICE void pa_mma_tf32(pa_mma_c& c, const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int t) {
    pa_mma_tf32(c, a.small, b.big[2 * t], b.big[2 * t + 1]);
    pa_mma_tf32(c, a.big, b.small[2 * t], b.small[2 * t + 1]);
    pa_mma_tf32(c, a.big, b.big[2 * t], b.big[2 * t + 1]);
}

PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c& c = tiles[k0 / PA_MMA_N];
    const unsigned raw[4] = {__float_as_uint(c[0]), __float_as_uint(c[2]), __float_as_uint(c[1]),
                             __float_as_uint(c[3])};
    pa_mma_split4(a, raw);
}
#else
// ---- NVIDIA 16-bit: mma.sync m16n8k16, fragments loaded with ldmatrix --------------------------------------------
// Fragments (g = lane / 4, t = lane % 4):
//   A 16x16 row-major, 4 x2 registers: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
//   B 16x8 (k x n), 2 x2 registers:    (k 2t..2t+1, n g), (k 2t+8..2t+9, n g)
#define PA_MMA_K 16
#define PA_MMA_ACC_TRUNCATES 0  // accumulate P·V in the unit across tiles
typedef unsigned pa_mma_a[4];
typedef unsigned pa_mma_b[4];

PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    pa_ldmatrix_x4(a, tile + (lane % 16) * ld + (lane / 16) * 8);
}
// b[0..1]: n 0..7, b[2..3]: n 8..15.
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    pa_ldmatrix_x4(b, tile + (lane % 8 + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 8);
}
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    pa_ldmatrix_x4_trans(b, tile + (lane % 16) * ld + (lane / 16) * 8);
}

PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int t) {
#if PA_BF16
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[2 * t]), "r"(b[2 * t + 1]));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[2 * t]), "r"(b[2 * t + 1]));
#endif
}

PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c* c = tiles + k0 / PA_MMA_N;  // two n8 tiles make one k16 step
    a[0] = pa_pack_x2(c[0][0], c[0][1]);
    a[1] = pa_pack_x2(c[0][2], c[0][3]);
    a[2] = pa_pack_x2(c[1][0], c[1][1]);
    a[3] = pa_pack_x2(c[1][2], c[1][3]);
}
#endif  // PA_F32

#if PA_MMA_WGMMA
#if PA_F32
#error "the warpgroup MMA path takes 16-bit inputs only"
#endif
// ---- NVIDIA Hopper (sm_90a): warpgroup MMA, wgmma.mma_async m64nNk16 ----------------------------------------------
// Four warps (a warpgroup) compute a 64 x N tile together; warp w of the group owns rows 16 w .. 16 w + 15, and its
// accumulator registers for columns 8 i .. 8 i + 7 are laid out as one m16n8 C fragment above, so N / 8 pa_mma_c
// fragments in a row form the accumulator. The A operand is read from registers (pa_mma_a: the m16n8k16 A fragment
// of the warp's 16 rows) or from shared memory; B always comes from shared memory. Shared operands are described by
// a 64-bit descriptor: start address, leading / stride byte offsets (bits 16 and 32, in 16-byte units) and the
// swizzle mode (bits 62-63, 1 = 128-byte swizzle). Tiles use the 128-byte swizzle: rows of 64 elements (128 bytes),
// the 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8-row groups 1024 bytes apart (the stride byte offset),
// blocks of 64 columns `lbo_bytes` apart. The operand is K-major (the reduction index runs along the row: Q, K) or,
// with the transpose flag, N-major (V, whose rows are keys).
#if PA_BF16
#define PA_WGMMA_AB "bf16.bf16"
#else
#define PA_WGMMA_AB "f16.f16"
#endif

PA_DEVICE unsigned long long pa_wgmma_desc(const void* smem, unsigned lbo_bytes) {
    const unsigned long long addr = pa_smem_addr(smem);
    return ((addr & 0x3ffffull) >> 4) | ((unsigned long long)(lbo_bytes >> 4) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
PA_DEVICE void pa_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
PA_DEVICE void pa_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most N committed groups are still in flight.
template <int N>
PA_DEVICE void pa_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// After the wait: the compiler must not read accumulators before it (they are written behind its back).
template <int N>
PA_DEVICE void pa_wgmma_settle(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (N / 2 floats) += A (64 x 16) * B (16 x N). ss: A and B in shared memory, both K-major; accumulate == 0
// overwrites d instead. rs: A in registers, B N-major (transposed). Score tiles are 64 keys wide (ss, N = 64);
// output tiles are the head dim wide (rs, N = 64 or 128).
PA_DEVICE void pa_wgmma_ss_n64(float* d, unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PA_WGMMA_AB " {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
PA_DEVICE void pa_wgmma_rs_n64(float* d, const unsigned (&a)[4], unsigned long long desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PA_WGMMA_AB " {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
PA_DEVICE void pa_wgmma_rs_n128(float* d, const unsigned (&a)[4], unsigned long long desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PA_WGMMA_AB " {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

template <int N>
PA_DEVICE void pa_wgmma_rs(float* d, const unsigned (&a)[4], unsigned long long desc_b) {
    static_assert(N == 64 || N == 128, "warpgroup MMA width must be 64 or 128");
    if constexpr (N == 64) pa_wgmma_rs_n64(d, a, desc_b);
    else pa_wgmma_rs_n128(d, a, desc_b);
}
#endif  // PA_MMA_WGMMA

#elif PA_WARP_SIZE == 64
// ---- 64-lane waves: MFMA 16x16x16 (f16, or bf16_1k) or 16x16x4f32 ------------------------------------------------
// C layout of both (pa_mfma.cuh, l = lane): column l % 16, rows 4 (l / 16) + i, i = 0..3.
#include "pa_mfma.cuh"
#define PA_MMA_M 16
#define PA_MMA_N 16
#define PA_MMA_B_TILES 1
#define PA_MMA_C_ROWS 4
#define PA_MMA_C_COLS 1
#define PA_MMA_ROW_LANES 16
#define PA_MMA_ACC_TRUNCATES 0  // accumulate P·V in the unit across tiles
typedef pa_mfma_f32x4 pa_mma_c;
PA_DEVICE int pa_mma_c_row(int rr) { return 4 * (pa_lane_id() / 16) + rr; }
PA_DEVICE int pa_mma_c_col(int /*cc*/) { return pa_lane_id() % 16; }

#if PA_F32
// float32: A: row l % 16, k = l / 16; B: column l % 16, k = l / 16 (one element each).
#define PA_MMA_K 4
typedef float pa_mma_a;
typedef float pa_mma_b;

PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const float* tile, int ld) {
    a = tile[(pa_lane_id() % 16) * ld + pa_lane_id() / 16];
}
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const float* tile, int ld) { pa_mma_load_a(b, tile, ld); }
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const float* tile, int ld) {
    b = tile[(pa_lane_id() / 16) * ld + pa_lane_id() % 16];
}
PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int /*t*/) {
    c = pa_mfma_f32_16x16x4f32(a, b, c);
}

// A lane (row r = l % 16, key k0 + l / 16) needs P[r][key], held by C lane 16 (r / 4) + key % 16 as element
// r % 4: every element is offered once and each lane keeps the one of its row.
PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c& c = tiles[k0 / PA_MMA_N];
    const int lane = pa_lane_id();
    const int r = lane % 16;
    const int src = 16 * (r / 4) + k0 % PA_MMA_N + lane / 16;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float v = pa_shfl(c[e], src, PA_WARP_SIZE);
        if (e == r % 4) a = v;
    }
}
#else
// 16-bit: A: row l % 16, k = 4 (l / 16) + j; B: column l % 16, k = 4 (l / 16) + j.
#define PA_MMA_K 16
#if PA_BF16
typedef pa_mfma_bf16x4 pa_mma_a;
#else
typedef pa_mfma_f16x4 pa_mma_a;
#endif
typedef pa_mma_a pa_mma_b;

// Four 16-bit elements from their raw bits (two packed words).
PA_DEVICE void pa_mma_frag_from_bits(pa_mma_a& f, unsigned lo, unsigned hi) {
#if defined(PA_VENDOR_CUDA)
    f[0] = lo & 0xffffu;  // the emulation's fragments hold raw bits already
    f[1] = lo >> 16;
    f[2] = hi & 0xffffu;
    f[3] = hi >> 16;
#else
    const unsigned bits[2] = {lo, hi};
    __builtin_memcpy(&f, bits, 8);
#endif
}

PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    const unsigned* p = reinterpret_cast<const unsigned*>(tile + (lane % 16) * ld + 4 * (lane / 16));
    pa_mma_frag_from_bits(a, p[0], p[1]);
}
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const pa_u16* tile, int ld) { pa_mma_load_a(b, tile, ld); }
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    const pa_u16* p = tile + 4 * (lane / 16) * ld + lane % 16;
    pa_mma_frag_from_bits(b, p[0] | ((unsigned)p[ld] << 16), p[2 * ld] | ((unsigned)p[3 * ld] << 16));
}

PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int /*t*/) {
#if PA_BF16
    c = pa_mfma_f32_16x16x16bf16_1k(a, b, c);
#else
    c = pa_mfma_f32_16x16x16f16(a, b, c);
#endif
}

// A lane (row r = l % 16, k = 4 (l / 16) + j) needs P[r][k], held by C lane 16 (r / 4) + k as element r % 4. In
// round m every lane offers its element (k % 4 - m) mod 4 and each lane takes the k with (k - r) % 4 == m, so four
// shuffles move the whole tile.
PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c* c = tiles + k0 / PA_MMA_N;
    const int lane = pa_lane_id();
    const int r = lane % 16, kb = 4 * (lane / 16), e = r % 4;
    float got[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        const int give = (e - m) & 3;
        const float offer = give == 0 ? c[0][0] : give == 1 ? c[0][1] : give == 2 ? c[0][2] : c[0][3];
        const int j = (e + m) & 3;
        const float v = pa_shfl(offer, 16 * (r / 4) + kb + j, PA_WARP_SIZE);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
            if (jj == j) got[jj] = v;
    }
    pa_mma_frag_from_bits(a, pa_pack_x2(got[0], got[1]), pa_pack_x2(got[2], got[3]));
}
#endif  // PA_F32

#else
#error "no matrix-unit path for this target (NVIDIA 32-lane warps or 64-lane MFMA waves)"
#endif

#if PA_MMA_WGMMA && !(PA_WARP_SIZE == 32 && defined(PA_VENDOR_CUDA))
#error "PA_MMA_WGMMA needs NVIDIA 32-lane warps (sm_90a)"
#endif
#define PA_MMA_C_REGS (PA_MMA_C_ROWS * PA_MMA_C_COLS)  // floats per C fragment

// ---- Shared tiles and tile products (the matrix-unit flash kernels) -----------------------------------------------
// A shared tile holds ROWS rows of PA_HEAD_DIM elements; pa_tile_offset<ROWS>(r, c) is the element offset of (r, c)
// for c a multiple of PA_TILE_CHUNK, and each chunk of PA_TILE_CHUNK elements (16 bytes) is contiguous. With the
// warpgroup MMA tiles use its 128-byte swizzled layout (above) and start 1024-byte aligned; otherwise rows are
// padded by 16 bytes, which keeps the fragment loads free of bank conflicts.
//
// A block's waves split its PA_BLOCK_M query rows into PA_MMA_M-row tiles, MT per wave; pa_wave_row<MT>(mt) is the
// first block row of this wave's tile mt (warpgroup MMA: the four warps of a group share each 64-row tile).
//   pa_tile_qk<MT, SN, BM, BN>(s, q_s, k_s)   s = Q K^T: this wave's rows of the BM-row tile q_s against the BN keys
//                                              of k_s (SN = BN / PA_MMA_N score fragments per row tile)
//   pa_tile_pv<MT, ON, BN>(acc, p, v_s)        acc += P V: the probabilities p (score fragments) against the BN
//                                              rows of v_s (ON = PA_HEAD_DIM / PA_MMA_N output fragments)
// These complete before they return (PA_TILE_ASYNC = 0). With the warpgroup MMA (PA_TILE_ASYNC = 1) the products
// are asynchronous instead: pa_tile_qk_start, pa_tile_pv_start (P as A fragments, from pa_tile_to_a) and the
// waits pa_tile_wait_scores<PENDING> / pa_tile_wait_all. PA_TILE_STAGES is the number of K and V buffers, and
// pa_tile_base gives the first tile in dynamic shared memory; pa_tile_store_row writes one output row.
#if defined(PA_HEAD_DIM)
constexpr int PA_TILE_CHUNK = 16 / (int)sizeof(pa_elem);

// The probabilities (score fragments) as A fragments of P V.
template <int MT, int SN, int KT>
PA_DEVICE void pa_tile_to_a(pa_mma_a (&a)[MT][KT], const pa_mma_c (&p)[MT][SN]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) pa_mma_a_from_c(a[mt][kk], p[mt], kk * PA_MMA_K);
}

#if PA_MMA_WGMMA
static_assert(PA_HEAD_DIM % 64 == 0, "the warpgroup MMA tiles need a head dim that is a multiple of 64");
#if defined(PA_BLOCK_N)
static_assert(PA_BLOCK_N == 64, "the warpgroup MMA score tiles are 64 keys wide");
#endif
#if defined(PA_THREADS)
static_assert(PA_THREADS % 128 == 0, "the warpgroup MMA needs whole warpgroups (128 threads)");
#endif
#define PA_TILE_ASYNC 1   // tile products: start / wait (below)
#define PA_TILE_STAGES 2  // K and V buffers
// The first tile: dynamic shared memory rounded up to 1024 bytes (the host adds 1024 - 16 bytes for it).
PA_DEVICE pa_elem* pa_tile_base(void* smem) {
    const unsigned pad = (1024 - pa_smem_addr(smem) % 1024) % 1024;
    return reinterpret_cast<pa_elem*>(static_cast<char*>(smem) + pad);
}
template <int ROWS>
__device__ constexpr int pa_tile_elems() {
    return ROWS * PA_HEAD_DIM;
}
template <int ROWS>
PA_DEVICE int pa_tile_offset(int r, int c) {
    return (c / 64) * ROWS * 64 + r * 64 + ((((c % 64) / 8) ^ (r % 8)) * 8);
}
// Operand start of rows r.. and columns c.. (r a multiple of 8, c of 16): the unit applies the swizzle itself.
template <int ROWS>
PA_DEVICE const pa_elem* pa_tile_operand(const pa_elem* tile, int r, int c) {
    return tile + (c / 64) * ROWS * 64 + r * 64 + c % 64;
}
template <int MT>
PA_DEVICE int pa_wave_row(int mt) {
    return (pa_wave_id() / 4) * MT * 64 + mt * 64 + (pa_wave_id() % 4) * PA_MMA_M;
}

// The tile products are asynchronous: *_start issues them and returns, the waits below complete them. Q K^T
// writes the scores and P V the output accumulators behind the compiler's back: neither may be touched between a
// start and its wait, and the A fragments of P V must stay unchanged until it completes. Q K^T overwrites s.
template <int MT, int SN, int BM, int BN>
PA_DEVICE void pa_tile_qk_start(pa_mma_c (&s)[MT][SN], const pa_elem* q_s, const pa_elem* k_s) {
    pa_wgmma_fence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int row = pa_wave_row<MT>(mt) - (pa_wave_id() % 4) * PA_MMA_M;  // the group's 64-row tile
#pragma unroll
        for (int k0 = 0; k0 < PA_HEAD_DIM; k0 += 16)
            pa_wgmma_ss_n64(&s[mt][0][0], pa_wgmma_desc(pa_tile_operand<BM>(q_s, row, k0), 16),
                            pa_wgmma_desc(pa_tile_operand<BN>(k_s, 0, k0), 16), k0 > 0);
    }
    pa_wgmma_commit();
}
template <int MT, int ON, int BN>
PA_DEVICE void pa_tile_pv_start(pa_mma_c (&acc)[MT][ON], const pa_mma_a (&a)[MT][BN / PA_MMA_K], const pa_elem* v_s) {
    pa_wgmma_fence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < BN / PA_MMA_K; ++kk)
            pa_wgmma_rs<PA_HEAD_DIM>(&acc[mt][0][0], a[mt][kk],
                                     pa_wgmma_desc(pa_tile_operand<BN>(v_s, kk * PA_MMA_K, 0), BN * 128));
    pa_wgmma_commit();
}
// Wait for the scores: Q K^T started before the last PENDING products (which may go on).
template <int PENDING, int MT, int SN>
PA_DEVICE void pa_tile_wait_scores(pa_mma_c (&s)[MT][SN]) {
    pa_wgmma_wait<PENDING>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) pa_wgmma_settle<SN * 4>(&s[mt][0][0]);
}
// Wait for everything started.
template <int MT, int ON>
PA_DEVICE void pa_tile_wait_all(pa_mma_c (&acc)[MT][ON]) {
    pa_wgmma_wait<0>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) pa_wgmma_settle<ON * 4>(&acc[mt][0][0]);
}
#else
#define PA_TILE_ASYNC 0   // tile products complete before they return
#define PA_TILE_STAGES 1  // K and V buffers
PA_DEVICE pa_elem* pa_tile_base(void* smem) { return static_cast<pa_elem*>(smem); }
constexpr int PA_TILE_LD = PA_HEAD_DIM + PA_TILE_CHUNK;  // padded row (elements)
template <int ROWS>
__device__ constexpr int pa_tile_elems() {
    return ROWS * PA_TILE_LD;
}
template <int ROWS>
PA_DEVICE int pa_tile_offset(int r, int c) {
    return r * PA_TILE_LD + c;
}
template <int MT>
PA_DEVICE int pa_wave_row(int mt) {
    return (pa_wave_id() * MT + mt) * PA_MMA_M;
}

template <int MT, int SN, int BM, int BN>
PA_DEVICE void pa_tile_qk(pa_mma_c (&s)[MT][SN], const pa_elem* q_s, const pa_elem* k_s) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < SN; ++j)
#pragma unroll
            for (int i = 0; i < PA_MMA_C_REGS; ++i) s[mt][j][i] = 0.f;
#pragma unroll 2  // unrolling all of the head dim lets the fragment loads run ahead and spill
    for (int k0 = 0; k0 < PA_HEAD_DIM; k0 += PA_MMA_K) {
        pa_mma_a a[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            pa_mma_load_a(a[mt], q_s + pa_tile_offset<BM>(pa_wave_row<MT>(mt), k0), PA_TILE_LD);
#pragma unroll
        for (int j = 0; j < SN; j += PA_MMA_B_TILES) {
            pa_mma_b kb;
            pa_mma_load_b_nk(kb, k_s + pa_tile_offset<BN>(j * PA_MMA_N, k0), PA_TILE_LD);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(s[mt][j + t], a[mt], kb, t);
        }
    }
}

template <int MT, int ON, int BN, int SN>
PA_DEVICE void pa_tile_pv(pa_mma_c (&acc)[MT][ON], const pa_mma_c (&p)[MT][SN], const pa_elem* v_s) {
    if constexpr (PA_MMA_ACC_TRUNCATES) {
        // The unit's float accumulation truncates: each tile's P V is summed in fresh fragments and added to the
        // running output with ordinary (round-to-nearest) float additions, so the rounding error does not grow
        // with the number of keys.
        pa_mma_a a[MT][BN / PA_MMA_K];
        pa_tile_to_a(a, p);
#pragma unroll
        for (int j = 0; j < ON; j += PA_MMA_B_TILES) {
            pa_mma_c part[MT][PA_MMA_B_TILES];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int t = 0; t < PA_MMA_B_TILES; ++t)
#pragma unroll
                    for (int i = 0; i < PA_MMA_C_REGS; ++i) part[mt][t][i] = 0.f;
#pragma unroll
            for (int kk = 0; kk < BN / PA_MMA_K; ++kk) {
                pa_mma_b vb;
                pa_mma_load_b_kn(vb, v_s + pa_tile_offset<BN>(kk * PA_MMA_K, j * PA_MMA_N), PA_TILE_LD);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(part[mt][t], a[mt][kk], vb, t);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int t = 0; t < PA_MMA_B_TILES; ++t)
#pragma unroll
                    for (int i = 0; i < PA_MMA_C_REGS; ++i) acc[mt][j + t][i] += part[mt][t][i];
        }
    } else {
#pragma unroll
        for (int k0 = 0; k0 < BN; k0 += PA_MMA_K) {
            pa_mma_a a[MT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) pa_mma_a_from_c(a[mt], p[mt], k0);
#pragma unroll
            for (int j = 0; j < ON; j += PA_MMA_B_TILES) {
                pa_mma_b vb;
                pa_mma_load_b_kn(vb, v_s + pa_tile_offset<BN>(k0, j * PA_MMA_N), PA_TILE_LD);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(acc[mt][j + t], a[mt], vb, t);
            }
        }
    }
}
#endif  // PA_MMA_WGMMA

// Store row rr of this lane's output fragments c (columns of fragment j start at j * PA_MMA_N), times `scale`.
template <int ON>
PA_DEVICE void pa_tile_store_row(pa_elem* row, const pa_mma_c (&c)[ON], int rr, float scale) {
    const int i = rr * PA_MMA_C_COLS;
#pragma unroll
    for (int j = 0; j < ON; ++j) {
        if constexpr (PA_MMA_C_COLS == 2) {  // two adjacent columns: one paired store
            pa_store_elem2(row + j * PA_MMA_N + pa_mma_c_col(0), c[j][i] * scale, c[j][i + 1] * scale);
        } else {
#pragma unroll
            for (int e = 0; e < PA_MMA_C_COLS; ++e)
                pa_store_elem(row + j * PA_MMA_N + pa_mma_c_col(e), c[j][i + e] * scale);
        }
    }
}
#endif  // PA_HEAD_DIM
