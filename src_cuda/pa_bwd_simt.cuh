// portattn backward pieces of the SIMT float32 kernels (flash_bwd_dkdv_simt.cu, flash_bwd_dq_simt.cu): the tile of
// probabilities P and score gradients dS = dlogit * P * (dP - delta) (pa_bwd.cuh) from shared rows, each element
// a dot product.
//
// The tile has ROWS x COLS elements at [r * (COLS + 1) + c]; KEY_ROWS says whether its rows are keys (the dK/dV
// kernel: S^T = K Q^T) or queries (the dQ kernel: S = Q K^T). a_s / b_s hold the rows / columns' operands of S
// (K and Q, or Q and K), a2_s / b2_s those of dP (V and dO, or dO and V), all [.][PA_SIMT_LD].
#pragma once

#include "pa_bwd_params.cuh"
#include "pa_simt.cuh"

template <bool KEY_ROWS, int ROWS, int COLS, class Mod>
PA_DEVICE void pa_bwd_simt_grads(float* p_s, float* ds_s, const float* a_s, const float* b_s, const float* a2_s,
                                 const float* b2_s, const float* lse_s, const float* delta_s, const PaMask& mask,
                                 const Mod& mod, float scale_log2, float scale, int row0, int col0, int q0) {
    for (int idx = threadIdx.x; idx < ROWS * COLS; idx += PA_THREADS) {
        const int r = idx / COLS, c = idx % COLS;
        const int query = KEY_ROWS ? col0 + c : row0 + r, key = KEY_ROWS ? row0 + r : col0 + c;
        const float s = pa_simt_dot(a_s + r * PA_SIMT_LD, b_s + c * PA_SIMT_LD);
        const float dp = pa_simt_dot(a2_s + r * PA_SIMT_LD, b2_s + c * PA_SIMT_LD);
        const float prob = pa_mask_visible(mask, query, key)
                               ? pa_exp2(pa_logit2_minus(mod, query, key, s, scale_log2, lse_s[query - q0]))
                               : 0.f;
        p_s[r * (COLS + 1) + c] = prob;
        ds_s[r * (COLS + 1) + c] = pa_dlogit(mod, s, scale) * prob * (dp - delta_s[query - q0]);
    }
}
