// Launch parameters of the backward kernels (flash_bwd_*.cu). The host's mirror is generated from this struct
// (portattn/runtime/params.py), so the member types are limited to those it knows.
//
// The backward of O = softmax(scale Q K^T) V with the forward's LSE: P = exp(scale Q K^T - LSE), dV = P^T dO,
// dP = dO V^T, dS = P * (dP - delta) with delta = rowsum(dO * O), dQ = scale dS K, dK = scale dS^T Q.
#pragma once

#include "pa_mask.cuh"

struct PaBwdParams {
    const void* q;     // [B, Hq, Nq, D], element strides below, unit stride along D (all tensors)
    const void* k;     // [B, Hk, Nk, D]
    const void* v;     // [B, Hk, Nk, D]
    const void* o;     // [B, Hq, Nq, D] the forward's output
    const void* dout;  // [B, Hq, Nq, D]
    const float* lse;  // [B, Hq, Nq] contiguous, natural log (the forward's)
    float* lse_log2;   // [B, Hq, Nq] contiguous: lse * log2(e), +inf for rows that see no key (written by prep)
    float* delta;      // [B, Hq, Nq] contiguous: rowsum(dO * O), written by the prep kernel
    float* dq_accum;   // [B, Hq, Nq, D] contiguous float32 sums of dQ (dq_atomic), zeroed by the host
    void* dq;          // [B, Hq, Nq, D]
    void* dk;          // [B, Hk, Nk, D]
    void* dv;          // [B, Hk, Nk, D]
    pa_i64 q_sb, q_sh, q_sn;
    pa_i64 k_sb, k_sh, k_sn;
    pa_i64 v_sb, v_sh, v_sn;
    pa_i64 o_sb, o_sh, o_sn;
    pa_i64 do_sb, do_sh, do_sn;
    pa_i64 dq_sb, dq_sh, dq_sn;
    pa_i64 dk_sb, dk_sh, dk_sn;
    pa_i64 dv_sb, dv_sh, dv_sn;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
    int causal;        // 1: key j is visible to query i only when j <= i (upper-left aligned)
    float scale;       // softmax scale (>= 0; the host makes it so)
    float scale_log2;  // scale times log2(e)
    int num_m_blocks;  // query blocks per head of the dQ kernel: ceil(seqlen_q / its PA_BLOCK_M)
    int num_n_blocks;  // key blocks per head of the dK/dV kernel: ceil(seqlen_k / its PA_BLOCK_N)
    int dq_atomic;     // 1: the dK/dV kernel also adds dQ into dq_accum (0: the dQ kernel computes dQ)
};

PA_DEVICE PaMask pa_bwd_mask(const PaBwdParams& p) { return PaMask{p.seqlen_k, p.causal, 0}; }

// Per query row of the tile m0 .. m0 + ROWS - 1: the LSE in log2 units and delta (0 for rows past the end, whose
// Q and dO rows are zeros, so that they add nothing). Called by the whole block.
template <int ROWS>
PA_DEVICE void pa_bwd_load_rows(float* lse_s, float* delta_s, const PaBwdParams& p, pa_i64 bh, int m0) {
    for (int i = threadIdx.x; i < ROWS; i += PA_THREADS) {
        const bool ok = m0 + i < p.seqlen_q;
        lse_s[i] = ok ? p.lse_log2[bh * p.seqlen_q + m0 + i] : 0.f;
        delta_s[i] = ok ? p.delta[bh * p.seqlen_q + m0 + i] : 0.f;
    }
}
