// Launch parameters of the forward kernels. The host's mirror is generated from this struct
// (portattn/runtime/params.py), so the member types are limited to those it knows.
#pragma once

#include "pa_mask.cuh"

struct PaFwdParams {
    const void* q;  // [B, Hq, Nq, D], element strides below, unit stride along D
    const void* k;  // [B, Hk, Nk, D]
    const void* v;  // [B, Hk, Nk, D]
    void* o;        // [B, Hq, Nq, D]
    float* lse;     // [B, Hq, Nq] contiguous, natural log; null when not requested
    pa_i64 q_sb, q_sh, q_sn;
    pa_i64 k_sb, k_sh, k_sn;
    pa_i64 v_sb, v_sh, v_sn;
    pa_i64 o_sb, o_sh, o_sn;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
    int causal;        // 1: key j is visible to query i only when j <= i (upper-left aligned)
    float scale_log2;  // softmax scale times log2(e)
    int num_m_blocks;  // ceil(seqlen_q / PA_BLOCK_M)
};

PA_DEVICE PaMask pa_fwd_mask(const PaFwdParams& p) { return PaMask{p.seqlen_k, p.causal, 0}; }

// The (batch, head), key/value head and first query row of work item `work` (PA_BLOCK_M query rows of one head;
// by default the block's own, one item per block). Consecutive items are the query blocks of one (batch, head), so
// that the items running at the same time share its K and V in the L2 cache; within a head the heavy (late) query
// blocks come first, which balances causal work.
struct PaBlock {
    int b, h, h_kv, row0;
};
PA_DEVICE PaBlock pa_block_coords(const PaFwdParams& p, int block_m, int work = (int)blockIdx.x) {
    const int m_block = p.num_m_blocks - 1 - work % p.num_m_blocks;
    const int bh = work / p.num_m_blocks;
    const int h = bh % p.heads_q;
    return PaBlock{bh / p.heads_q, h, h / (p.heads_q / p.heads_kv), m_block * block_m};
}
