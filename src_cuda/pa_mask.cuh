// portattn masking and score modifiers: which keys each query row sees, and what each visible score becomes.
// Shared by every kernel family.
//
// Query row i is aligned with key i + offset: offset 0 puts the diagonal upper-left (SDPA's is_causal), offset =
// seqlen_k - seqlen_q bottom-right (flash-attn's causal, and decoding: the last query row sees the last key). Row i
// sees the keys j with i + offset - left <= j <= i + offset + right, 0 <= begin and j < seqlen_k; PA_MASK_NONE
// leaves a side unbounded. Causal is right = 0, a sliding window sets left too. Keys at or past seqlen_k are never
// visible (tiles are padded). Rows see contiguous key ranges whose ends never decrease from one row to the next.
//   pa_mask_key_begin(m, row), pa_mask_key_end(m, row)
//                                            the keys row sees are [begin, end) (empty when begin >= end)
//   pa_mask_rows_key_begin(m, row0), pa_mask_rows_key_end(m, row0, rows)
//                                            the keys any of rows [row0, row0 + rows) sees lie in [begin, end)
//   pa_mask_tile_partial(m, row0, rows, n0, cols)
//                                            whether the key tile [n0, n0 + cols) hides a key from some row of
//                                            [row0, row0 + rows) (the tile then needs per-element masking)
//   pa_mask_first_row(m, n0), pa_mask_rows_end(m, n0, cols)
//                                            the query rows that see a key of [n0, n0 + cols) lie in [first, end)
//
// PaScoreMod (kernels compiled with PA_MASK_EXT and PA_SCORE_MOD, the extended masks with score modifiers): the
// softmax's logit of a visible score x of (row, key) is
//   softcap > 0:  softcap tanh(scale x / softcap), else scale x;
//   minus alibi_slope |row + offset - key|, plus mask[row, key] (an additive mask of float32, float16 or bfloat16),
//   or -inf where a boolean mask[row, key] is 0.
// pa_logit2(mod, row, key, x, scale_log2) gives it in log2 units, pa_dlogit(mod, x, scale) its derivative by x;
// both also take PaNoScoreMod (the plain logit, scale x).
#pragma once

#include "pa_prelude.cuh"

#ifndef PA_MASK_EXT
#define PA_MASK_EXT 0
#endif
// PA_SCORE_MOD 0 builds the extended masks (variable lengths, windows) without the score modifiers, which leaves their
// registers to the kernels that run near the register limit.
#ifndef PA_SCORE_MOD
#define PA_SCORE_MOD PA_MASK_EXT
#endif
#if PA_SCORE_MOD && !PA_MASK_EXT
#error "the score modifiers (PA_SCORE_MOD) come with the extended masks (PA_MASK_EXT)"
#endif

#define PA_MASK_NONE (1 << 30)
// Element types of an attention mask tensor (PaScoreMod::mask_kind).
#define PA_MASK_BOOL 1
#define PA_MASK_F32 2
#define PA_MASK_F16 3
#define PA_MASK_BF16 4

struct PaMask {
    int seqlen_k;
    int offset;       // row i is aligned with key i + offset
    int left, right;  // row i sees keys [i + offset - left, i + offset + right]; PA_MASK_NONE: unbounded
};

PA_DEVICE int pa_mask_key_begin(const PaMask& m, int row) {
    return m.left == PA_MASK_NONE ? 0 : max(0, row + m.offset - m.left);
}
PA_DEVICE int pa_mask_key_end(const PaMask& m, int row) {
    return m.right == PA_MASK_NONE ? m.seqlen_k : max(0, min(m.seqlen_k, row + m.offset + m.right + 1));
}
PA_DEVICE int pa_mask_rows_key_begin(const PaMask& m, int row0) { return pa_mask_key_begin(m, row0); }
PA_DEVICE int pa_mask_rows_key_end(const PaMask& m, int row0, int rows) { return pa_mask_key_end(m, row0 + rows - 1); }
PA_DEVICE bool pa_mask_tile_partial(const PaMask& m, int row0, int rows, int n0, int cols) {
    return n0 + cols > pa_mask_key_end(m, row0) || n0 < pa_mask_key_begin(m, row0 + rows - 1);
}
PA_DEVICE int pa_mask_first_row(const PaMask& m, int n0) {
    return m.right == PA_MASK_NONE ? 0 : max(0, n0 - m.offset - m.right);
}
PA_DEVICE int pa_mask_rows_end(const PaMask& m, int n0, int cols) {
    return m.left == PA_MASK_NONE ? PA_MASK_NONE : max(0, n0 + cols - m.offset + m.left);
}

// Whether key `key` is visible to `row`.
PA_DEVICE bool pa_mask_visible(const PaMask& m, int row, int key) {
    return key >= pa_mask_key_begin(m, row) && key < pa_mask_key_end(m, row);
}

struct PaScoreMod {
    float scale;        // softmax scale
    float softcap;      // > 0: logits are softcap tanh(scale x / softcap)
    float alibi_slope;  // this head's ALiBi slope (0: none)
    int offset;         // the mask's diagonal offset (ALiBi distance)
    const void* mask;   // mask rows of this (batch, head), element stride 1 along keys; or null
    int mask_kind;      // PA_MASK_BOOL / _F32 / _F16 / _BF16
    pa_i64 mask_sn;     // row stride of the mask (elements)
    int rows;           // query rows of the sequence (mask rows past it are not read)
};

// tanh(y) to float32 accuracy in absolute terms (within a few 1e-8): the softcapped logit is softcap tanh(y), and
// its absolute error is what the softmax sees. (tanhf itself becomes a coarse approximation with fast math.)
PA_DEVICE float pa_tanh(float y) {
    const float e = pa_exp2(-2.f * PA_LOG2E * fabsf(y));
    return copysignf((1.f - e) / (1.f + e), y);
}

PA_DEVICE float pa_logit2(const PaScoreMod& mod, int row, int key, float x, float) {
    float t = x * mod.scale;
    if (mod.softcap > 0.f) t = mod.softcap * pa_tanh(t / mod.softcap);
    t -= mod.alibi_slope * fabsf((float)(row + mod.offset - key));
    if (mod.mask != nullptr && row < mod.rows) {
        const pa_i64 at = (pa_i64)row * mod.mask_sn + key;
        switch (mod.mask_kind) {
            case PA_MASK_BOOL:
                t = static_cast<const unsigned char*>(mod.mask)[at] ? t : pa_neg_inf();
                break;
            case PA_MASK_F32:
                t += static_cast<const float*>(mod.mask)[at];
                break;
            case PA_MASK_F16:
                t += pa_f16_bits_to_float(static_cast<const unsigned short*>(mod.mask)[at]);
                break;
            default:
                t += pa_bf16_bits_to_float(static_cast<const unsigned short*>(mod.mask)[at]);
                break;
        }
    }
    return t * PA_LOG2E;
}
PA_DEVICE float pa_dlogit(const PaScoreMod& mod, float x, float) {
    if (mod.softcap <= 0.f) return mod.scale;
    const float th = pa_tanh(x * mod.scale / mod.softcap);
    return mod.scale * (1.f - th * th);
}

// The plain logits, the scores times the scale (kernels without PA_SCORE_MOD). Where a function takes a score
// modifier, PaNoScoreMod{} stands for none.
struct PaNoScoreMod {};
template <class Mod>
struct PaModActive {
    static constexpr bool value = true;
};
template <>
struct PaModActive<PaNoScoreMod> {
    static constexpr bool value = false;
};
// The logit (log2 units) of score x and its derivative by x, with or without modifiers (or with a function
// (row, key, x) -> logit); pa_logit2_minus(mod, row, key, x, scale_log2, m) is the logit minus m (one fused
// multiply-add without modifiers).
PA_DEVICE float pa_logit2(const PaNoScoreMod&, int, int, float x, float scale_log2) { return x * scale_log2; }
template <class F>
PA_DEVICE float pa_logit2(const F& logit2, int row, int key, float x, float) {
    return logit2(row, key, x);
}
template <class Mod>
PA_DEVICE float pa_logit2_minus(const Mod& mod, int row, int key, float x, float scale_log2, float m) {
    if constexpr (PaModActive<Mod>::value) return pa_logit2(mod, row, key, x, scale_log2) - m;
    return fmaf(x, scale_log2, -m);
}
PA_DEVICE float pa_dlogit(const PaNoScoreMod&, float, float scale) { return scale; }
// Whether a modifier changes any logit (a call of a PA_MASK_EXT kernel with windows or variable lengths only has
// none, and takes the plain path).
PA_DEVICE bool pa_mod_any(const PaScoreMod& mod) {
    return mod.softcap > 0.f || mod.alibi_slope != 0.f || mod.mask != nullptr;
}
template <class F>
PA_DEVICE bool pa_mod_any(const F&) {
    return true;
}

// One sequence of a batch, from a family's parameters (members cu_seqlens_q / _k, seqlen_q / _k, total_q / _k,
// bottom_right, window_left / _right): its first rows in the (packed) tensors, its lengths and its mask. Offsets that
// leave the packed tensors, decrease, or give a sequence longer than seqlen_q / _k (the longest, from the host) make
// the sequence empty: the kernels never read or write outside the tensors for them. Without PA_MASK_EXT every
// sequence has the full lengths and no row's keys start after key 0.
struct PaSeq {
    pa_i64 q_start, k_start;  // first row of the sequence along the queries and the keys (0 without cu_seqlens)
    int seqlen_q, seqlen_k;
    PaMask mask;
};
template <class Params>
PA_DEVICE PaSeq pa_seq(const Params& p, int b) {
    PaSeq s{0, 0, p.seqlen_q, p.seqlen_k, PaMask{}};
#if PA_MASK_EXT
    if (p.cu_seqlens_q != nullptr) {
        const int q0 = p.cu_seqlens_q[b], q1 = p.cu_seqlens_q[b + 1];
        const int k0 = p.cu_seqlens_k[b], k1 = p.cu_seqlens_k[b + 1];
        const bool ok = 0 <= q0 && q0 <= q1 && q1 <= p.total_q && q1 - q0 <= p.seqlen_q && 0 <= k0 && k0 <= k1 &&
                        k1 <= p.total_k && k1 - k0 <= p.seqlen_k;
        s.q_start = ok ? q0 : 0;
        s.seqlen_q = ok ? q1 - q0 : 0;
        s.k_start = ok ? k0 : 0;
        s.seqlen_k = ok ? k1 - k0 : 0;
    }
    const int left = p.window_left;
#else
    const int left = PA_MASK_NONE;
#endif
    s.mask = PaMask{s.seqlen_k, p.bottom_right ? s.seqlen_k - s.seqlen_q : 0, left, p.window_right};
    return s;
}

// The score modifiers of head h of sequence b (members scale, softcap, alibi_slopes, alibi_sb, mask, mask_kind,
// mask_sb / _sh / _sn): a PaScoreMod with PA_SCORE_MOD, else PaNoScoreMod.
#if PA_SCORE_MOD
typedef PaScoreMod PaMod;
template <class Params>
PA_DEVICE PaScoreMod pa_seq_mod(const Params& p, const PaSeq& s, int b, int h) {
    const int mask_bytes = p.mask_kind == PA_MASK_BOOL ? 1 : p.mask_kind == PA_MASK_F32 ? 4 : 2;
    const void* mask =
        p.mask == nullptr ? nullptr : static_cast<const char*>(p.mask) + (b * p.mask_sb + h * p.mask_sh) * mask_bytes;
    const float slope = p.alibi_slopes == nullptr ? 0.f : p.alibi_slopes[b * p.alibi_sb + h];
    return PaScoreMod{p.scale, p.softcap, slope, s.mask.offset, mask, p.mask_kind, p.mask_sn, s.seqlen_q};
}
#else
typedef PaNoScoreMod PaMod;
template <class Params>
PA_DEVICE PaNoScoreMod pa_seq_mod(const Params&, const PaSeq&, int, int) {
    return PaNoScoreMod{};
}
#endif
