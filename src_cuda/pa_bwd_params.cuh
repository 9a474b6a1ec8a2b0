// Launch parameters of the backward kernels (flash_bwd_*.cu). The host's mirror is generated from this struct
// (portattn/runtime/params.py), so the member types are limited to those it knows.
//
// The backward of O = softmax(scale Q K^T) V with the forward's LSE: P = exp(scale Q K^T - LSE), dV = P^T dO,
// dP = dO V^T, dS = P * (dP - delta) with delta = rowsum(dO * O), dQ = scale dS K, dK = scale dS^T Q (with score
// modifiers the logit's derivative replaces scale). Layouts, variable lengths and masks as in the forward
// (pa_fwd_params.cuh); lse, lse_log2, delta and dq_accum are row arrays [B, Hq, Nq] (dq_accum: times D), or
// [Hq, total_q] for packed sequences.
#pragma once

#include "pa_mask.cuh"

struct PaBwdParams {
    PaTensorMap map_q, map_do;  // q and dout for bulk copies (the Hopper warpgroup-MMA dK/dV kernel; else unused)
    const void* q;              // [B, Hq, Nq, D], element strides below, unit stride along D (all tensors)
    const void* k;              // [B, Hk, Nk, D]
    const void* v;              // [B, Hk, Nk, D]
    const void* o;              // [B, Hq, Nq, D] the forward's output
    const void* dout;           // [B, Hq, Nq, D]
    const float* lse;           // row array, natural log (the forward's)
    float* lse_log2;            // row array: lse * log2(e), +inf for rows that see no key (written by prep)
    float* delta;               // row array: rowsum(dO * O), written by the prep kernel
    float* dq_accum;            // row array of D float32 sums of dQ each (dq_atomic), zeroed by the prep kernel
    void* dq;                   // [B, Hq, Nq, D]
    void* dk;                   // [B, Hk, Nk, D]
    void* dv;                   // [B, Hk, Nk, D]
    const int* cu_seqlens_q;    // [B + 1] (varlen), or null
    const int* cu_seqlens_k;    // [B + 1] (varlen), or null
    const float* alibi_slopes;  // [B, Hq] (batch stride alibi_sb, 0 for [Hq]), or null
    const void* mask;           // attention mask rows (mask_kind), unit stride along keys, or null
    pa_i64 q_sb, q_sh, q_sn;
    pa_i64 k_sb, k_sh, k_sn;
    pa_i64 v_sb, v_sh, v_sn;
    pa_i64 o_sb, o_sh, o_sn;
    pa_i64 do_sb, do_sh, do_sn;
    pa_i64 dq_sb, dq_sh, dq_sn;
    pa_i64 dk_sb, dk_sh, dk_sn;
    pa_i64 dv_sb, dv_sh, dv_sn;
    pa_i64 mask_sb, mask_sh, mask_sn;
    pa_i64 alibi_sb;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k;  // seqlen_*: the longest sequence's with cu_seqlens
    int total_q;                                       // rows per head of the row arrays: seqlen_q, or every packed row
    int total_k;                                       // rows of the packed k tensor (cu_seqlens' bound)
    int bottom_right;               // 1: the diagonal is aligned bottom-right in each sequence (0: upper-left)
    int window_left, window_right;  // keys visible around the diagonal (PaMask; PA_MASK_NONE: unbounded)
    int mask_kind;                  // PA_MASK_BOOL, ... when mask is set
    float scale;                    // softmax scale (>= 0; the host makes it so)
    float scale_log2;               // scale times log2(e), at least the smallest normal float
    float softcap;                  // > 0: logits are softcap tanh(scale s / softcap)
    int num_m_blocks;               // query blocks per head of the dQ kernel: ceil(seqlen_q / its PA_BLOCK_M)
    int num_n_blocks;               // key blocks per head of the dK/dV kernel: ceil(seqlen_k / its PA_BLOCK_N)
    int dq_atomic;                  // 1: the dK/dV kernel also adds dQ into dq_accum (0: the dQ kernel computes dQ)
};

// The index of row 0 of head h of sequence `seq` (pa_seq) of batch entry b in the row arrays.
PA_DEVICE pa_i64 pa_bwd_row0(const PaBwdParams& p, const PaSeq& seq, int b, int h) {
    return ((p.cu_seqlens_q != nullptr ? 0 : (pa_i64)b) * p.heads_q + h) * p.total_q + seq.q_start;
}

// Per query row of the tile m0 .. m0 + ROWS - 1 (row array rows from `rows`): the LSE in log2 units and delta (0 for
// rows past the end, whose Q and dO rows are zeros, so that they add nothing). Called by the whole block.
template <int ROWS>
PA_DEVICE void pa_bwd_load_rows(float* lse_s, float* delta_s, const PaBwdParams& p, pa_i64 rows, int seqlen_q, int m0) {
    for (int i = threadIdx.x; i < ROWS; i += PA_THREADS) {
        const bool ok = m0 + i < seqlen_q;
        lse_s[i] = ok ? p.lse_log2[rows + m0 + i] : 0.f;
        delta_s[i] = ok ? p.delta[rows + m0 + i] : 0.f;
    }
}
