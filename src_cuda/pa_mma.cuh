// portattn matrix-unit tiles: one interface for the kernels over NVIDIA mma.sync (32-lane warps) and AMD MFMA
// (64-lane waves: gfx90a, and NVIDIA under the wave64 emulation). Like pa_prelude.cuh, these headers are the only
// place that knows the vendor; kernel bodies use the names below.
//
// One MMA computes a PA_MMA_M x PA_MMA_N tile C += A (PA_MMA_M x PA_MMA_K) * B (PA_MMA_K x PA_MMA_N) with float
// accumulation. Inputs (pa_elem in memory, pa_prelude_elem.cuh) are float16 or bfloat16 (PA_BF16 = 1), or float32
// (PA_F32 = 1: three TF32 products on NVIDIA, native fp32 MFMA on AMD). Per lane:
//   pa_mma_a   A fragment                 pa_mma_load_a(a, tile, ld): A from a row-major [m][k] shared tile, for
//                                         products with pa_mma_load_b_nk operands; pa_mma_load_a_kn(a, tile, ld):
//                                         the same A for products with pa_mma_load_b_kn operands
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
//
// Implementations, one header each: pa_mma_sync.cuh (NVIDIA mma.sync m16n8k16, ldmatrix), pa_mma_tf32.cuh
// (NVIDIA float32 as 3xTF32 on m16n8k8), pa_mma_wgmma.cuh (Hopper warpgroup MMA, the instructions the tile level
// uses with PA_MMA_WGMMA), pa_mma_mfma.cuh (AMD MFMA on 64-lane waves). The tile level above them is pa_tile.cuh.
#pragma once

#include "pa_prelude_elem.cuh"

#if PA_WARP_SIZE == 32 && defined(PA_VENDOR_CUDA)
#include "pa_mma_sync.cuh"
#if PA_F32
#include "pa_mma_tf32.cuh"
#endif
#if PA_MMA_WGMMA
#include "pa_mma_wgmma.cuh"
#endif
#elif PA_WARP_SIZE == 64
#include "pa_mma_mfma.cuh"
#else
#error "no matrix-unit path for this target (NVIDIA 32-lane warps or 64-lane MFMA waves)"
#endif

#if PA_MMA_WGMMA && !(PA_WARP_SIZE == 32 && defined(PA_VENDOR_CUDA))
#error "PA_MMA_WGMMA needs NVIDIA 32-lane warps (sm_90a)"
#endif
#define PA_MMA_C_REGS (PA_MMA_C_ROWS * PA_MMA_C_COLS)  // floats per C fragment

// C fragments set to zero: a row of N of them, or an MT x N array.
template <int N>
PA_DEVICE void pa_mma_c_zero(pa_mma_c (&c)[N]) {
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
        for (int i = 0; i < PA_MMA_C_REGS; ++i) c[j][i] = 0.f;
}
template <int MT, int N>
PA_DEVICE void pa_mma_c_zero(pa_mma_c (&c)[MT][N]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) pa_mma_c_zero(c[mt]);
}
