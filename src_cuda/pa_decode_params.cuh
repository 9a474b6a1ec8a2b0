// Launch parameters of the decode kernels (flash_decode_mma.cu, flash_decode_combine.cu): attention of a few query
// positions per sequence over a KV cache, contiguous or paged. The host's mirror is generated from this struct
// (portattn/runtime/params.py), so the member types are limited to those it knows.
//
// Layouts are flash-attn's: q and o [B, Nq, Hq, D], the cache [B, capacity, Hk, D] or pages [P, page_size, Hk, D]
// with block_table [B, max_pages]. Sequence b holds cache_seqlens[b] keys before the call; the append kernel writes
// the seqlen_new new keys and values (k_new, v_new [B, Nnew, Hk, D]) after them, and attention covers all
// cache_seqlens[b] + seqlen_new. Query rows of one key/value head are packed: row r of (b, h_kv) is query position
// r % Nq of head h_kv * G + r / Nq (G = Hq / Hk), so that the heads of a group read K and V once. Keys are split
// over blocks (num_splits); with more than one split each block writes its rows normalised by its own sum and its
// LSE into o_part / lse_part, and the combine kernel merges them.
//
// Sequence b reads the cache of sequence cache_batch_idx[b] (when given) from cache row cache_leftpad[b] (when
// given): its keys are the rows [leftpad, cache_seqlens[b] + seqlen_new) and key j is row leftpad + j. Query
// position i is aligned bottom-right (with L keys: key i + L - Nq) and sees the keys in [i + L - Nq - window_left,
// i + L - Nq + window_right] (pa_mask.cuh; causal is window_right = 0). A left bound, softcap and ALiBi slopes need
// kernels compiled with PA_MASK_EXT.
#pragma once

#include "pa_mask.cuh"

struct PaDecodeParams {
    const void* q;               // [B, Nq, Hq, D], element strides below, unit stride along D (all tensors)
    const void* k;               // [B, capacity, Hk, D], or pages [P, page_size, Hk, D]
    const void* v;               // like k
    void* o;                     // [B, Nq, Hq, D]
    float* lse;                  // [B, Hq, Nq] contiguous, natural log; null when not asked for
    float* o_part;               // [num_splits, B, Hq, Nq, D] float32 (num_splits > 1)
    float* lse_part;             // [num_splits, B, Hq, Nq] float32 (num_splits > 1)
    const void* k_new;           // [B, Nnew, Hk, D] keys to append (null: none)
    const void* v_new;           // [B, Nnew, Hk, D]
    const int* cache_seqlens;    // [B] keys of each sequence before the append
    const int* block_table;      // [B, max_pages] page of each page_size keys; null for a contiguous cache
    const int* cache_batch_idx;  // [B] the cache sequence of each batch row (contiguous caches), or null
    const int* cache_leftpad;    // [B] first cache row of each sequence, or null
    const float* alibi_slopes;   // [B, Hq] (batch stride alibi_sb, 0 for [Hq]), or null
    pa_i64 alibi_sb;
    pa_i64 q_sb, q_sn, q_sh;
    pa_i64 k_sb, k_sn, k_sh;  // k_sb steps a sequence (contiguous) or a page (paged)
    pa_i64 v_sb, v_sn, v_sh;
    pa_i64 o_sb, o_sn, o_sh;
    pa_i64 kn_sb, kn_sn, kn_sh;
    pa_i64 vn_sb, vn_sn, vn_sh;
    int batch, heads_q, heads_kv, seqlen_q;
    int seqlen_new;                 // keys appended per sequence (0: none)
    int capacity;                   // keys a sequence can hold: the cache length, or max_pages * page_size
    int page_size;                  // 0: contiguous cache
    int page_shift;                 // log2(page_size) when that is a power of two, else -1
    int max_pages;                  // block_table row length
    int num_pages;                  // pages in the pool (P)
    int cache_batch;                // sequences in a contiguous cache (cache_batch_idx's bound)
    int window_left, window_right;  // keys visible around the bottom-right diagonal (PA_MASK_NONE: unbounded)
    float scale, softcap;           // softmax scale; softcap > 0: logits are softcap tanh(scale s / softcap)
    float scale_log2;               // scale times log2(e), at least the smallest normal float
    int row_blocks;                 // ceil(G * Nq / PA_BLOCK_M)
    int num_splits;                 // key splits per (sequence, head)
    int keys_per_split;             // a multiple of PA_BLOCK_N
    int combine_groups;             // slots of the combine kernel that share a row (a power of two)
};

// Where row `key` of cache sequence b (PaDecodeSeq::cache_b: the batch row itself with a page table, which
// cache_batch_idx does not go with) lies: the sequence's or the page's index and the row in it. K and V share it.
// A page outside the pool sets `bad` and gives page 0 instead.
struct PaCacheAt {
    int seq, row;
};
PA_DEVICE PaCacheAt pa_decode_locate(const PaDecodeParams& p, int b, int key, bool& bad) {
    if (p.page_size == 0) return {b, key};
    const bool pow2 = p.page_shift >= 0;  // spares the division
    const int index = pow2 ? key >> p.page_shift : key / p.page_size;
    const int row = pow2 ? key & (p.page_size - 1) : key - index * p.page_size;
    int page = p.block_table[(pa_i64)b * p.max_pages + index];
    if (page < 0 || page >= p.num_pages) {
        bad = true;
        page = 0;
    }
    return {page, row};
}
// The row at `at` (pa_decode_locate) of the cache tensor `base` (strides sb, sn, sh), key/value head h_kv.
PA_DEVICE const void* pa_decode_cache_row(const void* base, pa_i64 sb, pa_i64 sn, pa_i64 sh, int elem_bytes,
                                          PaCacheAt at, int h_kv) {
    return static_cast<const char*>(base) + ((pa_i64)at.seq * sb + (pa_i64)at.row * sn + h_kv * sh) * elem_bytes;
}

// Where sequence b's keys live: the cache sequence, its first row and the number of keys (cache and new); keys is
// -1 when cache_batch_idx, cache_leftpad or the length is out of range (cache_b is then 0).
struct PaDecodeSeq {
    int cache_b, first, keys;
};
PA_DEVICE PaDecodeSeq pa_decode_seq(const PaDecodeParams& p, int b) {
    const int cache_b = p.cache_batch_idx != nullptr ? p.cache_batch_idx[b] : b;
    const int first = p.cache_leftpad != nullptr ? p.cache_leftpad[b] : 0;
    const int end = p.cache_seqlens[b] + p.seqlen_new;
    const bool ok =
        cache_b >= 0 && cache_b < p.cache_batch && first >= 0 && first <= p.cache_seqlens[b] && end <= p.capacity;
    return ok ? PaDecodeSeq{cache_b, first, end - first} : PaDecodeSeq{0, 0, -1};
}
