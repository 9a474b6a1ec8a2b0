// portattn matrix-core building blocks for 64-lane waves: the AMD CDNA2 (gfx90a) MFMA instructions, their operand
// fragment types and lane layouts. Include after pa_prelude.cuh. Like the prelude, this file may know the vendor:
// on HIP every function is one MFMA builtin; on NVIDIA, under PA_EMULATE_WAVE64 (a wave is two warps), every
// function computes exactly what the documented lane layout says, so kernels written against the AMD layout run
// (slowly) on NVIDIA for verification. Kernels built for 32-lane waves must not include this file.
//
// One function per instruction (D = A * B + C, f32 accumulate; all operands per lane):
//   pa_mfma_f32_32x32x8f16      (pa_mfma_f16x4  a, pa_mfma_f16x4  b, pa_mfma_f32x16 c)
//   pa_mfma_f32_16x16x16f16     (pa_mfma_f16x4  a, pa_mfma_f16x4  b, pa_mfma_f32x4  c)
//   pa_mfma_f32_32x32x8bf16_1k  (pa_mfma_bf16x4 a, pa_mfma_bf16x4 b, pa_mfma_f32x16 c)
//   pa_mfma_f32_16x16x16bf16_1k (pa_mfma_bf16x4 a, pa_mfma_bf16x4 b, pa_mfma_f32x4  c)
//   pa_mfma_f32_32x32x2f32      (float a, float b, pa_mfma_f32x16 c)
//   pa_mfma_f32_16x16x4f32      (float a, float b, pa_mfma_f32x4  c)
// Fragments are indexed with [] (element j of A/B, i of C). fp16 elements are pa_mfma_f16 (_Float16 on HIP, the
// raw IEEE binary16 bits on NVIDIA); bf16 elements are pa_mfma_bf16 (__bf16 where the compiler has it, else raw
// bits: see below). Convert with pa_mfma_{f16,bf16}_{to,from}_float; never do arithmetic on the element types.
//
// Lane layouts (pa_mfma_layout_<MxNxK>::a_row / a_k / b_k / b_col / c_row / c_col, lane 0..63):
//   A (M x K):  lane l, element j holds A[l % M][(K / G) * (l / M) + j]    with G = 64 / M lane groups
//   B (K x N):  lane l, element j holds B[(K / G) * (l / N) + j][l % N]
//   C, D (M x N, f32): lane l, element i holds C[(64 / N) * 4 * (i / 4) + 4 * (l / N) + i % 4][l % N]
// i.e. for 32x32x8: A row l%32, k = 4*(l/32)+j; C row 8*(i/4) + 4*(l/32) + i%4. For 16x16x16: A row l%16,
// k = 4*(l/16)+j; C row 4*(l/16)+i. For 32x32x2f32 and 16x16x4f32 each lane holds one A and one B element
// (k = l/32, resp. l/16) and C is laid out as for the 16-bit instruction of the same M x N.
// Checked against AMD's matrix instruction calculator (github.com/ROCm/amd_matrix_instruction_calculator,
// matrix_calculator.py: the cdna2 table gives M, N, K and blocks = 1 for all six instructions, and
// InstCalcGfx9's input mapping puts A[i][k] in lane M*(k / (K*M/64)) + i, register slot k % (K*M/64); its output
// mapping puts C[i][j] in lane N*((i / 4) % (64/N)) + j, register 4*(i / (4*64/N)) + i % 4); e.g. for
// v_mfma_f32_16x16x16f16, A[0][0..3] are in lane 0 and A[0][4..7] in lane 16.
// portattn/tools/fragments.py holds the same layouts for the host. tests/kernels/mfma_layouts.json keeps the
// calculator's own per-lane output for CDNA2 and CDNA3 as data: tests/kernels/test_fragments.py compares the host
// tables with it, tests/kernels/test_mfma.py the probe kernel's lane fragments (which follow these functions).
#pragma once

#if PA_WARP_SIZE != 64
#error "pa_mfma.cuh: MFMA operates on 64-lane waves; build with PA_WARP_SIZE=64 (include it only in 64-lane builds)"
#endif
#if defined(PA_VENDOR_CUDA) && !defined(PA_EMULATE_WAVE64)
#error "pa_mfma.cuh: on NVIDIA the MFMA functions exist only under the wave64 emulation (PA_EMULATE_WAVE64)"
#endif

#define PA_HAS_MFMA 1

// ---- lane layouts (both vendors) ---------------------------------------------------------------------------

// Single-block MFMA of shape M x N x K on a 64-lane wave. Element counts are per lane.
template <int M_, int N_, int K_>
struct pa_mfma_layout {
    static constexpr int M = M_;
    static constexpr int N = N_;
    static constexpr int K = K_;
    static constexpr int A_ELEMS = M * K / PA_WARP_SIZE;
    static constexpr int B_ELEMS = N * K / PA_WARP_SIZE;
    static constexpr int C_ELEMS = M * N / PA_WARP_SIZE;
    static_assert(M == N && (M == 16 || M == 32), "single-block 16x16 or 32x32 MFMA shapes only");
    static_assert(A_ELEMS >= 1 && A_ELEMS * PA_WARP_SIZE == M * K, "K must fill whole lane groups");

    static PA_DEVICE int a_row(int lane, int /*j*/) { return lane % M; }
    static PA_DEVICE int a_k(int lane, int j) { return A_ELEMS * (lane / M) + j; }
    static PA_DEVICE int b_k(int lane, int j) { return B_ELEMS * (lane / N) + j; }
    static PA_DEVICE int b_col(int lane, int /*j*/) { return lane % N; }
    static PA_DEVICE int c_row(int lane, int i) { return (PA_WARP_SIZE / N) * 4 * (i / 4) + 4 * (lane / N) + i % 4; }
    static PA_DEVICE int c_col(int lane, int /*i*/) { return lane % N; }
};

typedef pa_mfma_layout<32, 32, 8> pa_mfma_layout_32x32x8;    // 32x32x8f16, 32x32x8bf16_1k
typedef pa_mfma_layout<16, 16, 16> pa_mfma_layout_16x16x16;  // 16x16x16f16, 16x16x16bf16_1k
typedef pa_mfma_layout<32, 32, 2> pa_mfma_layout_32x32x2;    // 32x32x2f32
typedef pa_mfma_layout<16, 16, 4> pa_mfma_layout_16x16x4;    // 16x16x4f32

// ---- bf16 elements -----------------------------------------------------------------------------------------------
// The compiler's own bf16 type where it has one: clang >= 17 makes __bf16 an arithmetic type on AMDGPU (seen with
// the clang 21 of ROCm 6.4 and the clang 22 of ROCm 7.2; the bf16_1k builtins take vectors of it there), so
// conversions are the compiler's (one instruction on gfx950). Otherwise (ROCm 5.2's clang 15 rejects __bf16, and
// the NVIDIA emulation) raw 16-bit bits with hand-written conversions. pa_mfma_bf16_bits gives the bits either way.
#if defined(PA_VENDOR_HIP) && defined(__clang_major__) && __clang_major__ >= 17
#define PA_MFMA_BF16_NATIVE 1
typedef __bf16 pa_mfma_bf16;

PA_DEVICE float pa_mfma_bf16_to_float(pa_mfma_bf16 x) { return (float)x; }
PA_DEVICE pa_mfma_bf16 pa_mfma_bf16_from_float(float x) { return (pa_mfma_bf16)x; }  // round to nearest even
PA_DEVICE unsigned short pa_mfma_bf16_bits(pa_mfma_bf16 x) {
    unsigned short bits;
    __builtin_memcpy(&bits, &x, 2);
    return bits;
}
#else
#define PA_MFMA_BF16_NATIVE 0
typedef short pa_mfma_bf16;

PA_DEVICE float pa_mfma_bf16_to_float(pa_mfma_bf16 x) { return __uint_as_float((unsigned)(unsigned short)x << 16); }

// Round to nearest even; NaN stays a (quiet) NaN.
PA_DEVICE pa_mfma_bf16 pa_mfma_bf16_from_float(float x) {
    const unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (pa_mfma_bf16)((u >> 16) | 0x40u);
    return (pa_mfma_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
PA_DEVICE unsigned short pa_mfma_bf16_bits(pa_mfma_bf16 x) { return (unsigned short)x; }
#endif

#if defined(PA_VENDOR_HIP)
// ---- HIP: fragments are the builtins' vector types, each function one instruction ----------------------------

typedef _Float16 pa_mfma_f16;
typedef _Float16 pa_mfma_f16x4 __attribute__((ext_vector_type(4)));
typedef pa_mfma_bf16 pa_mfma_bf16x4 __attribute__((ext_vector_type(4)));
typedef float pa_mfma_f32x4 __attribute__((ext_vector_type(4)));
typedef float pa_mfma_f32x16 __attribute__((ext_vector_type(16)));

PA_DEVICE float pa_mfma_f16_to_float(pa_mfma_f16 x) { return (float)x; }
PA_DEVICE pa_mfma_f16 pa_mfma_f16_from_float(float x) { return (pa_mfma_f16)x; }

PA_DEVICE pa_mfma_f32x16 pa_mfma_f32_32x32x8f16(pa_mfma_f16x4 a, pa_mfma_f16x4 b, pa_mfma_f32x16 c) {
    return __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0);
}
PA_DEVICE pa_mfma_f32x4 pa_mfma_f32_16x16x16f16(pa_mfma_f16x4 a, pa_mfma_f16x4 b, pa_mfma_f32x4 c) {
    return __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0);
}
#if !defined(__gfx908__)
// gfx908 (CDNA1) lacks the bf16_1k instructions (and ROCm 5.2's compiler aborts on them): no declaration there.
PA_DEVICE pa_mfma_f32x16 pa_mfma_f32_32x32x8bf16_1k(pa_mfma_bf16x4 a, pa_mfma_bf16x4 b, pa_mfma_f32x16 c) {
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
}
PA_DEVICE pa_mfma_f32x4 pa_mfma_f32_16x16x16bf16_1k(pa_mfma_bf16x4 a, pa_mfma_bf16x4 b, pa_mfma_f32x4 c) {
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
}
#endif
PA_DEVICE pa_mfma_f32x16 pa_mfma_f32_32x32x2f32(float a, float b, pa_mfma_f32x16 c) {
    return __builtin_amdgcn_mfma_f32_32x32x2f32(a, b, c, 0, 0, 0);
}
PA_DEVICE pa_mfma_f32x4 pa_mfma_f32_16x16x4f32(float a, float b, pa_mfma_f32x4 c) {
    return __builtin_amdgcn_mfma_f32_16x16x4f32(a, b, c, 0, 0, 0);
}

#else
// ---- NVIDIA, wave64 emulation ----------------------------------------------------------------------------------
// Each lane stores its A and B elements (as fp32: fp16 and bf16 convert exactly) into its wave's scratch row,
// the wave meets at its named barrier, each lane computes its C elements with fp32 FMAs in k order (k = 0..K-1,
// starting from C; fp16 and bf16 products are exact in fp32), and the wave meets again before the row is reused.
// The hardware's internal summation order and rounding of the K products are not specified by the layout
// documents: results agree exactly whenever every partial sum is exact in fp32, otherwise to within fp32
// accumulation error.

template <class T, int N>
struct pa_mfma_vec {
    T v[N];
    PA_DEVICE T& operator[](int i) { return v[i]; }
    PA_DEVICE const T& operator[](int i) const { return v[i]; }
};

typedef unsigned short pa_mfma_f16;  // IEEE binary16 bits
typedef pa_mfma_vec<pa_mfma_f16, 4> pa_mfma_f16x4;
typedef pa_mfma_vec<pa_mfma_bf16, 4> pa_mfma_bf16x4;
typedef pa_mfma_vec<float, 4> pa_mfma_f32x4;
typedef pa_mfma_vec<float, 16> pa_mfma_f32x16;

PA_DEVICE float pa_mfma_f16_to_float(pa_mfma_f16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}
PA_DEVICE pa_mfma_f16 pa_mfma_f16_from_float(float x) {
    pa_mfma_f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

// Per-wave scratch for one instruction's A (M x K) and B (K x N) operands, in fp32; the largest instructions
// (32x32x8, 16x16x16) need 2 * 256 floats. Sized for the block's waves when PA_THREADS is known.
#define PA_MFMA_EMU_FLOATS 512
#if defined(PA_THREADS)
#define PA_MFMA_EMU_WAVES ((PA_THREADS + 63) / 64)
#else
#define PA_MFMA_EMU_WAVES PA_EMU_MAX_WAVES
#endif
static_assert(PA_MFMA_EMU_WAVES <= PA_EMU_MAX_WAVES, "wave64 emulation supports at most 15 waves per block");
static __shared__ float pa_mfma_emu_scratch[PA_MFMA_EMU_WAVES][PA_MFMA_EMU_FLOATS];

PA_DEVICE float pa_mfma_emu_elem(const pa_mfma_f16x4& v, int j) { return pa_mfma_f16_to_float(v[j]); }
PA_DEVICE float pa_mfma_emu_elem(const pa_mfma_bf16x4& v, int j) { return pa_mfma_bf16_to_float(v[j]); }
PA_DEVICE float pa_mfma_emu_elem(float v, int) { return v; }

template <class L, class Frag, class Acc>
PA_DEVICE Acc pa_mfma_emulate(const Frag& a, const Frag& b, Acc c) {
    static_assert(L::M * L::K + L::K * L::N <= PA_MFMA_EMU_FLOATS, "MFMA emulation scratch too small");
    float* sa = pa_mfma_emu_scratch[pa_wave_id()];
    float* sb = sa + L::M * L::K;  // B stored k-major: sb[k * N + col]
    const int lane = pa_lane_id();
#pragma unroll
    for (int j = 0; j < L::A_ELEMS; ++j) sa[L::a_row(lane, j) * L::K + L::a_k(lane, j)] = pa_mfma_emu_elem(a, j);
#pragma unroll
    for (int j = 0; j < L::B_ELEMS; ++j) sb[L::b_k(lane, j) * L::N + L::b_col(lane, j)] = pa_mfma_emu_elem(b, j);
    pa_emu_wave_barrier();
#pragma unroll
    for (int i = 0; i < L::C_ELEMS; ++i) {
        const float* arow = sa + L::c_row(lane, i) * L::K;
        const float* bcol = sb + L::c_col(lane, i);
        float acc = c[i];
#pragma unroll
        for (int k = 0; k < L::K; ++k) acc = __fmaf_rn(arow[k], bcol[k * L::N], acc);
        c[i] = acc;
    }
    pa_emu_wave_barrier();  // the scratch row is reused by the next instruction
    return c;
}

PA_DEVICE pa_mfma_f32x16 pa_mfma_f32_32x32x8f16(pa_mfma_f16x4 a, pa_mfma_f16x4 b, pa_mfma_f32x16 c) {
    return pa_mfma_emulate<pa_mfma_layout_32x32x8>(a, b, c);
}
PA_DEVICE pa_mfma_f32x4 pa_mfma_f32_16x16x16f16(pa_mfma_f16x4 a, pa_mfma_f16x4 b, pa_mfma_f32x4 c) {
    return pa_mfma_emulate<pa_mfma_layout_16x16x16>(a, b, c);
}
PA_DEVICE pa_mfma_f32x16 pa_mfma_f32_32x32x8bf16_1k(pa_mfma_bf16x4 a, pa_mfma_bf16x4 b, pa_mfma_f32x16 c) {
    return pa_mfma_emulate<pa_mfma_layout_32x32x8>(a, b, c);
}
PA_DEVICE pa_mfma_f32x4 pa_mfma_f32_16x16x16bf16_1k(pa_mfma_bf16x4 a, pa_mfma_bf16x4 b, pa_mfma_f32x4 c) {
    return pa_mfma_emulate<pa_mfma_layout_16x16x16>(a, b, c);
}
PA_DEVICE pa_mfma_f32x16 pa_mfma_f32_32x32x2f32(float a, float b, pa_mfma_f32x16 c) {
    return pa_mfma_emulate<pa_mfma_layout_32x32x2>(a, b, c);
}
PA_DEVICE pa_mfma_f32x4 pa_mfma_f32_16x16x4f32(float a, float b, pa_mfma_f32x4 c) {
    return pa_mfma_emulate<pa_mfma_layout_16x16x4>(a, b, c);
}
#endif
