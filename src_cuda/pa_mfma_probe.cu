// Exercises every MFMA function of pa_mfma.cuh, for the tests that compare the results with float64 matrix
// products and the fragment layouts written down on the host (tests/test_gpu_mfma.py, portattn/fragments.py):
// executed on a 64-lane target (the wave64 emulation on NVIDIA, a CDNA GPU natively), compiled for gfx90a.
// Not used by attention.
//
// One kernel per instruction, pa_mfma_probe_<instruction> (e.g. pa_mfma_probe_32x32x8f16). Each wave w of the
// grid (w = block * waves per block + wave in block) works on its own matrices, all row-major:
//   a  [w][2][M][K]  instruction input type (fp16, bf16 raw bits or fp32)
//   b  [w][2][K][N]
//   c  [w][M][N]     fp32
// It loads A0, B0, A1, B1 and C into fragments by the layout functions of pa_mfma.cuh, computes
// D1 = A0 * B0 + C and then D2 = A1 * B1 + D1 (the accumulator chained through a second instruction), and writes
// d1 [w][M][N] and d2 [w][M][N] by the C layout. frags[thread][0 .. A_ELEMS + B_ELEMS + C_ELEMS) receives the
// thread's raw fragments as floats: A0's elements, B0's, then D1's.
#include "pa_prelude.cuh"
#include "pa_mfma.cuh"

struct PaMfmaProbeParams {
    const void* a;
    const void* b;
    const float* c;
    float* d1;
    float* d2;
    float* frags;
};

namespace {

template <class F, class T>
PA_DEVICE void put(F& frag, int j, T v) {
    frag[j] = v;
}
PA_DEVICE void put(float& frag, int, float v) { frag = v; }

template <class F>
PA_DEVICE auto get(const F& frag, int j) {
    return frag[j];
}
PA_DEVICE float get(float frag, int) { return frag; }

PA_DEVICE float f32_to_float(float x) { return x; }

template <class Op>
PA_DEVICE void run_probe(const PaMfmaProbeParams& p) {
    typedef typename Op::Layout L;
    typedef typename Op::In In;
    constexpr int M = L::M, N = L::N, K = L::K;
    const int lane = pa_lane_id();
    const pa_i64 wave = (pa_i64)blockIdx.x * (blockDim.x / PA_WARP_SIZE) + pa_wave_id();
    const In* a = static_cast<const In*>(p.a) + wave * 2 * M * K;
    const In* b = static_cast<const In*>(p.b) + wave * 2 * K * N;
    const pa_i64 cbase = wave * M * N;

    typename Op::Frag fa[2], fb[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int j = 0; j < L::A_ELEMS; ++j) put(fa[s], j, a[s * M * K + L::a_row(lane, j) * K + L::a_k(lane, j)]);
#pragma unroll
        for (int j = 0; j < L::B_ELEMS; ++j) put(fb[s], j, b[s * K * N + L::b_k(lane, j) * N + L::b_col(lane, j)]);
    }
    typename Op::Acc acc;
#pragma unroll
    for (int i = 0; i < L::C_ELEMS; ++i) acc[i] = p.c[cbase + L::c_row(lane, i) * N + L::c_col(lane, i)];

    acc = Op::mma(fa[0], fb[0], acc);

    float* frags = p.frags + ((pa_i64)blockIdx.x * blockDim.x + threadIdx.x) * (L::A_ELEMS + L::B_ELEMS + L::C_ELEMS);
#pragma unroll
    for (int j = 0; j < L::A_ELEMS; ++j) frags[j] = Op::to_float(get(fa[0], j));
#pragma unroll
    for (int j = 0; j < L::B_ELEMS; ++j) frags[L::A_ELEMS + j] = Op::to_float(get(fb[0], j));
#pragma unroll
    for (int i = 0; i < L::C_ELEMS; ++i) {
        frags[L::A_ELEMS + L::B_ELEMS + i] = acc[i];
        p.d1[cbase + L::c_row(lane, i) * N + L::c_col(lane, i)] = acc[i];
    }

    acc = Op::mma(fa[1], fb[1], acc);

#pragma unroll
    for (int i = 0; i < L::C_ELEMS; ++i) p.d2[cbase + L::c_row(lane, i) * N + L::c_col(lane, i)] = acc[i];
}

}  // namespace

// One operation descriptor and one kernel per instruction.
#define PA_MFMA_PROBE(INSTR, LAYOUT, IN, FRAG, ACC, TO_FLOAT)                                                         \
    namespace {                                                                                                       \
    struct Op_##INSTR {                                                                                               \
        typedef LAYOUT Layout;                                                                                        \
        typedef IN In;                                                                                                \
        typedef FRAG Frag;                                                                                            \
        typedef ACC Acc;                                                                                              \
        static PA_DEVICE Acc mma(const Frag& a, const Frag& b, const Acc& c) { return pa_mfma_f32_##INSTR(a, b, c); } \
        static PA_DEVICE float to_float(IN x) { return TO_FLOAT(x); }                                                 \
    };                                                                                                                \
    }                                                                                                                 \
    extern "C" __global__ void pa_mfma_probe_##INSTR(const PaMfmaProbeParams p) { run_probe<Op_##INSTR>(p); }

PA_MFMA_PROBE(32x32x8f16, pa_mfma_layout_32x32x8, pa_mfma_f16, pa_mfma_f16x4, pa_mfma_f32x16, pa_mfma_f16_to_float)
PA_MFMA_PROBE(16x16x16f16, pa_mfma_layout_16x16x16, pa_mfma_f16, pa_mfma_f16x4, pa_mfma_f32x4, pa_mfma_f16_to_float)
PA_MFMA_PROBE(32x32x8bf16_1k, pa_mfma_layout_32x32x8, pa_mfma_bf16, pa_mfma_bf16x4, pa_mfma_f32x16,
              pa_mfma_bf16_to_float)
PA_MFMA_PROBE(16x16x16bf16_1k, pa_mfma_layout_16x16x16, pa_mfma_bf16, pa_mfma_bf16x4, pa_mfma_f32x4,
              pa_mfma_bf16_to_float)
PA_MFMA_PROBE(32x32x2f32, pa_mfma_layout_32x32x2, float, float, pa_mfma_f32x16, f32_to_float)
PA_MFMA_PROBE(16x16x4f32, pa_mfma_layout_16x16x4, float, float, pa_mfma_f32x4, f32_to_float)
