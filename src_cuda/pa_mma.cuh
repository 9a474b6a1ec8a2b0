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
//   pa_mma_c   C fragment: PA_MMA_C_ROWS rows x PA_MMA_C_COLS columns, element rr * PA_MMA_C_COLS + cc at
//              (pa_mma_c_row(rr), pa_mma_c_col(cc)); the lanes holding one row form segments of PA_MMA_ROW_LANES
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
template <int N>
PA_DEVICE void pa_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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
// HIP: plain copies (the loads of the next tile are not overlapped with compute).
PA_DEVICE void pa_async_copy16(void* dst_smem, const void* src, bool valid) {
    *static_cast<uint4*>(dst_smem) = valid ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}
PA_DEVICE void pa_async_commit() {}
template <int N>
PA_DEVICE void pa_async_wait() {}

PA_DEVICE unsigned pa_to_16bit(float x) {
#if PA_BF16
    const unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN stays NaN
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;          // round to nearest even
#else
    const _Float16 h = (_Float16)x;
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

#if PA_WARP_SIZE == 32 && defined(PA_VENDOR_CUDA)
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
//   A 16x8: (g, t), (g+8, t), (g, t+4), (g+8, t+4)    B 8x8 (k x n): (k t, n g), (k t+4, n g)    C as m16n8k16.
// For P·V the key order inside a k8 step is permuted: k = t holds key 2t and k = t + 4 key 2t + 1, so that the
// score C fragment is the A fragment as it stands; the V fragments are loaded with the same permutation.
#define PA_MMA_M 16
#define PA_MMA_N 8
#define PA_MMA_K 8
#define PA_MMA_B_TILES 2
#define PA_MMA_C_ROWS 2
#define PA_MMA_C_COLS 2
#define PA_MMA_ROW_LANES 4
#define PA_MMA_ACC_TRUNCATES 1  // sum P·V tiles outside the unit: its float accumulation truncates
struct pa_mma_a {
    unsigned big[4], small[4];
};
struct pa_mma_b {  // two n tiles: registers 0..1 for n 0..7, 2..3 for n 8..15
    unsigned big[4], small[4];
};
typedef float pa_mma_c[4];

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

PA_DEVICE int pa_mma_c_row(int rr) { return pa_lane_id() / 4 + 8 * rr; }
PA_DEVICE int pa_mma_c_col(int cc) { return 2 * (pa_lane_id() % 4) + cc; }

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
//   C 16x8 float, 4 registers:         (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
#define PA_MMA_M 16
#define PA_MMA_N 8
#define PA_MMA_K 16
#define PA_MMA_B_TILES 2
#define PA_MMA_C_ROWS 2
#define PA_MMA_C_COLS 2
#define PA_MMA_ROW_LANES 4
#define PA_MMA_ACC_TRUNCATES 0  // accumulate P·V in the unit across tiles
typedef unsigned pa_mma_a[4];
typedef unsigned pa_mma_b[4];
typedef float pa_mma_c[4];

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

PA_DEVICE int pa_mma_c_row(int rr) { return pa_lane_id() / 4 + 8 * rr; }
PA_DEVICE int pa_mma_c_col(int cc) { return 2 * (pa_lane_id() % 4) + cc; }

PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c* c = tiles + k0 / PA_MMA_N;  // two n8 tiles make one k16 step
    a[0] = pa_pack_x2(c[0][0], c[0][1]);
    a[1] = pa_pack_x2(c[0][2], c[0][3]);
    a[2] = pa_pack_x2(c[1][0], c[1][1]);
    a[3] = pa_pack_x2(c[1][2], c[1][3]);
}
#endif  // PA_F32

#elif PA_WARP_SIZE == 64
// ---- 64-lane waves: MFMA 16x16x16 (f16, or bf16_1k) or 16x16x4f32 ------------------------------------------------
// C layout of both (pa_mfma.cuh, l = lane): column l % 16, rows 4 (l / 16) + i, i = 0..3.
#include "pa_mfma.cuh"

#if PA_F32
// float32: A: row l % 16, k = l / 16; B: column l % 16, k = l / 16 (one element each).
#define PA_MMA_M 16
#define PA_MMA_N 16
#define PA_MMA_K 4
#define PA_MMA_B_TILES 1
#define PA_MMA_C_ROWS 4
#define PA_MMA_C_COLS 1
#define PA_MMA_ROW_LANES 16
#define PA_MMA_ACC_TRUNCATES 0  // accumulate P·V in the unit across tiles
typedef float pa_mma_a;
typedef float pa_mma_b;
typedef pa_mfma_f32x4 pa_mma_c;

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

PA_DEVICE int pa_mma_c_row(int rr) { return 4 * (pa_lane_id() / 16) + rr; }
PA_DEVICE int pa_mma_c_col(int /*cc*/) { return pa_lane_id() % 16; }

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
#define PA_MMA_M 16
#define PA_MMA_N 16
#define PA_MMA_K 16
#define PA_MMA_B_TILES 1
#define PA_MMA_C_ROWS 4
#define PA_MMA_C_COLS 1
#define PA_MMA_ROW_LANES 16
#define PA_MMA_ACC_TRUNCATES 0  // accumulate P·V in the unit across tiles
#if PA_BF16
typedef pa_mfma_bf16x4 pa_mma_a;
#else
typedef pa_mfma_f16x4 pa_mma_a;
#endif
typedef pa_mma_a pa_mma_b;
typedef pa_mfma_f32x4 pa_mma_c;

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

PA_DEVICE int pa_mma_c_row(int rr) { return 4 * (pa_lane_id() / 16) + rr; }
PA_DEVICE int pa_mma_c_col(int /*cc*/) { return pa_lane_id() % 16; }

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
        const int give = ((lane % 16) % 4 - m) & 3;
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
