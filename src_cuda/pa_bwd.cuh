// portattn backward pieces shared by the backward kernels on the matrix units (flash_bwd_dkdv_mma.cu,
// flash_bwd_dq_mma.cu): the query rows' LSE and delta in shared memory, and the step from recomputed scores S and
// dP = dO V^T to the probabilities P and the score gradients dS = scale * P * (dP - delta).
//
// A tile of scores has rows and columns; KEY_ROWS says which are the keys: the dK/dV kernel computes S^T (rows are
// keys, columns queries), the dQ kernel S (rows are queries, columns keys).
#pragma once

#include "pa_bwd_params.cuh"
#include "pa_tile.cuh"

// s: scores -> probabilities P; dp: dO V^T -> dS = dlogit * P * (dP - delta) (dlogit: the scale, or the derivative of
// the modified logit, pa_mask.cuh). The tile's rows start at row0 and its columns at col0 (indices in the sequence);
// lse_s / delta_s hold the query rows' LSE (log2 units) and delta from q0 on. MASKED: some elements are hidden (the
// causal diagonal, a window, keys past the end) and get P = dS = 0.
template <bool KEY_ROWS, bool MASKED, int MT, int SN, class Mod>
PA_DEVICE void pa_bwd_scores_to_grads(pa_mma_c (&s)[MT][SN], pa_mma_c (&dp)[MT][SN], const float* lse_s,
                                      const float* delta_s, const PaMask& mask, const Mod& mod, float scale_log2,
                                      float scale, int row0, int col0, int q0) {
    auto one = [&](int mt, int r, int j, int e) {
        const int row = row0 + pa_wave_row<MT>(mt) + pa_mma_c_row(r);
        const int col = col0 + j * PA_MMA_N + pa_mma_c_col(e);
        const int query = KEY_ROWS ? col : row, key = KEY_ROWS ? row : col;
        const int i = r * PA_MMA_C_COLS + e;
        const float x = s[mt][j][i];
        float prob = 0.f;
        if (!MASKED || pa_mask_visible(mask, query, key))
            prob = pa_exp2(pa_logit2_minus(mod, query, key, x, scale_log2, lse_s[query - q0]));
        s[mt][j][i] = prob;
        dp[mt][j][i] = pa_dlogit(mod, x, scale) * prob * (dp[mt][j][i] - delta_s[query - q0]);
    };
    // The query's LSE and delta are read where they are used: with keys as rows, one query column at a time (for
    // every row), so that they do not stay in registers across the rows.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        if constexpr (KEY_ROWS) {
#pragma unroll
            for (int j = 0; j < SN; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e)
#pragma unroll
                    for (int r = 0; r < PA_MMA_C_ROWS; ++r) one(mt, r, j, e);
        } else {
#pragma unroll
            for (int r = 0; r < PA_MMA_C_ROWS; ++r)
#pragma unroll
                for (int j = 0; j < SN; ++j)
#pragma unroll
                    for (int e = 0; e < PA_MMA_C_COLS; ++e) one(mt, r, j, e);
        }
    }
}

template <bool KEY_ROWS, int MT, int SN, class Mod>
PA_DEVICE void pa_bwd_grads(pa_mma_c (&s)[MT][SN], pa_mma_c (&dp)[MT][SN], const float* lse_s, const float* delta_s,
                            const PaMask& mask, const Mod& mod, float scale_log2, float scale, int row0, int col0,
                            int q0, bool masked) {
    if constexpr (PaModActive<Mod>::value) {
        if (!pa_mod_any(mod)) {
            pa_bwd_grads<KEY_ROWS>(s, dp, lse_s, delta_s, mask, PaNoScoreMod{}, scale_log2, scale, row0, col0, q0,
                                   masked);
            return;
        }
    }
    if (masked)
        pa_bwd_scores_to_grads<KEY_ROWS, true>(s, dp, lse_s, delta_s, mask, mod, scale_log2, scale, row0, col0, q0);
    else
        pa_bwd_scores_to_grads<KEY_ROWS, false>(s, dp, lse_s, delta_s, mask, mod, scale_log2, scale, row0, col0, q0);
}

// Store this wave's rows of C fragments c (ON column tiles from column c0) into rows row0.. of `out` (row stride
// `stride`), rows at or past `rows` skipped, times `scale`.
template <int MT, int ON>
PA_DEVICE void pa_bwd_store_rows(const pa_mma_c (&c)[MT][ON], pa_elem* out, pa_i64 stride, int row0, int rows,
                                 float scale) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
            const int row = row0 + pa_wave_row<MT>(mt) + pa_mma_c_row(r);
            if (row < rows) pa_tile_store_row(out + (pa_i64)row * stride, c[mt], r, scale);
        }
}
