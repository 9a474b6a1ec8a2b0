// Launch parameters of the forward kernels. The host's mirror is generated from this struct
// (portattn/runtime/params.py), so the member types are limited to those it knows.
//
// Fixed-length batches: q [B, Hq, Nq, D], k and v [B, Hk, Nk, D], o like q, in element strides. Variable-length
// (packed) batches: cu_seqlens_q / cu_seqlens_k give the first row of each sequence, the batch strides are 0 and
// seqlen_q / seqlen_k are the longest sequence's lengths; sequence b has rows [cu[b], cu[b + 1]). Variable lengths,
// windows with a left bound and the score modifiers need kernels compiled with PA_MASK_EXT.
#pragma once

#include "pa_mask.cuh"

struct PaFwdParams {
    PaTensorMap map_q, map_k, map_v, map_o;  // q, k, v, o for bulk copies (Hopper warp-specialized kernel; else unused)
    const void* q;                           // unit stride along D (all tensors)
    const void* k;
    const void* v;
    void* o;
    float* lse;                 // natural log, unit stride along rows; null when not requested
    const int* cu_seqlens_q;    // [B + 1] (varlen), or null
    const int* cu_seqlens_k;    // [B + 1] (varlen), or null
    const float* alibi_slopes;  // [B, Hq] (batch stride alibi_sb, 0 for [Hq]), or null
    const void* mask;           // attention mask rows (mask_kind, pa_mask.cuh), unit stride along keys, or null
    pa_i64 q_sb, q_sh, q_sn;
    pa_i64 k_sb, k_sh, k_sn;
    pa_i64 v_sb, v_sh, v_sn;
    pa_i64 o_sb, o_sh, o_sn;
    pa_i64 lse_sb, lse_sh;
    pa_i64 mask_sb, mask_sh, mask_sn;
    pa_i64 alibi_sb;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
    int total_q, total_k;           // rows of the packed q and k tensors (cu_seqlens' bound)
    int bottom_right;               // 1: the diagonal is aligned bottom-right in each sequence (0: upper-left)
    int window_left, window_right;  // keys visible around the diagonal (PaMask; PA_MASK_NONE: unbounded)
    int mask_kind;                  // PA_MASK_BOOL, ... (pa_mask.cuh) when mask is set
    float scale;                    // softmax scale (>= 0; the host makes it so)
    float scale_log2;               // scale times log2(e), at least the smallest normal float
    float softcap;                  // > 0: logits are softcap tanh(scale s / softcap)
    int num_m_blocks;               // ceil(seqlen_q / PA_BLOCK_M)
    int num_units;                  // persistent kernels: units of work (below)
    // Persistent kernels split a unit's index with these (pa_div): units per (batch, head) (below), heads_q, and
    // heads_q / heads_kv.
    PaDiv units_div, heads_div, group_div;
};

// The (batch, head), key/value head and first query row of this block's work (block_m query rows of one head).
// Consecutive blocks take the query blocks of one (batch, head), so that the blocks running at the same time share
// its K and V in the L2 cache; within a head the heavy (late) query blocks come first, which balances causal work.
struct PaBlock {
    int b, h, h_kv, row0;
};
// Kernels with a block per query block divide once per block, plainly: the divisors' multipliers (pa_unit_block)
// would cost the float32 simt kernel a register spill there.
PA_DEVICE PaBlock pa_block_coords(const PaFwdParams& p, int block_m) {
    const int work = blockIdx.x, bh = work / p.num_m_blocks, h = bh % p.heads_q;
    return PaBlock{bh / p.heads_q, h, h / (p.heads_q / p.heads_kv),
                   (p.num_m_blocks - 1 - work % p.num_m_blocks) * block_m};
}

// Persistent kernels: block i takes the units of work i, i + gridDim.x, ... A unit is one query block or, under a
// right window bound (causal: a query block's work grows with its index), two of one (batch, head): the k-th heaviest
// and the k-th lightest, so that the units cost the same (but for the middle block of an odd count, alone).
// Consecutive units take one (batch, head), heavy ones first, like pa_block_coords; a pair runs its light block
// first, so that the heavy one starts on the keys the light one has just read, still in the L2 cache. The host counts
// them (num_units: batch * heads_q units per head, units_div: num_m_blocks, halved rounding up for pairs) and sizes
// the grid by that count (forward.py).
PA_DEVICE bool pa_paired_units(const PaFwdParams& p) { return p.window_right != PA_MASK_NONE; }
// The query blocks of a unit (1 or 2).
PA_DEVICE int pa_unit_parts(const PaFwdParams& p, int unit) {
    return pa_paired_units(p) && 2 * pa_mod(p.units_div, unit) + 1 < p.num_m_blocks ? 2 : 1;
}
// Query block `part` of a unit: of a pair the light one (0), then the heavy one (1).
PA_DEVICE PaBlock pa_unit_block(const PaFwdParams& p, int block_m, int unit, int part) {
    const int bh = pa_div(p.units_div, unit), k = unit - bh * p.units_div.d;
    const int b = pa_div(p.heads_div, bh), h = bh - b * p.heads_q;
    const bool light = pa_paired_units(p) && part == 0;
    return PaBlock{b, h, pa_div(p.group_div, h), (light ? k : p.num_m_blocks - 1 - k) * block_m};
}
