// portattn online softmax on matrix-unit score fragments (base 2), shared by the matrix-unit kernel families.
//
// A wave holds MT row tiles of scores, SN C fragments per row tile (pa_mma.cuh layout). The scale (>= 0, the host
// makes it so) is folded into the exponent's multiply-add.
//   PaSoftmax<MT>                               running maxima (log2 units), partial sums, rescale factors per row
//   pa_softmax_init(sm)
//   pa_softmax_tile(s, sm, mask, mod, scale_log2, row0, rows, n0)
//                                               scores of keys n0 .. of rows row0 .. row0 + rows - 1 into
//                                               probabilities; moves the maxima and sums; returns whether any
//                                               output row needs rescaling. mod: PaNoScoreMod{}, a PaScoreMod
//                                               or a function (row, key, score) -> logit (log2 units)
//   pa_softmax_tile(s, sm, keys, mod, scale_log2, row0, n0, masked)
//                                               the same with the visible keys of each row given by a function
//                                               (keys(row): a PaKeyRange), masking when `masked`
//   pa_softmax_rescale(acc, sm)                 applies the rescale factors to the output fragments
//   pa_softmax_finish(acc, sm, row0, emit)      per output row of this wave: emit(row, mt, rr, inv, lse) with (mt,
//                                               rr) the row's place in the C fragments, inv the normaliser (0 for a
//                                               row that saw no key) and lse its natural-log LSE (-inf then)
//   pa_softmax_merge_key_waves(acc, sm, scratch)
//                                               with PA_KEY_WAVES > 1: the waves that share rows add their output
//                                               fragments and sums into the first one's (all threads call it;
//                                               scratch: PA_SOFTMAX_MERGE_FLOATS<MT, ON> floats of shared memory)
//   pa_softmax_store(acc, sm, o, o_stride, row0, seqlen_q, lse)
//                                               normalises and stores this wave's output rows (and their LSE)
#pragma once

#include "pa_mask.cuh"
#include "pa_tile.cuh"

// The running maximum moves only when a score exceeds it by more than this (log2 units): until then the
// probabilities stay below 2^8 (fine for float16 operands) and the output and sums need no rescaling.
#define PA_SOFTMAX_RESCALE_SLACK 8.f
// A row's maximum and sum over a lane's scores run in this many independent chains, combined at the end: one chain
// waits out each operation's latency in turn (32 in a row for a 128-key tile on the warpgroup MMA).
#define PA_SOFTMAX_CHAINS 4

template <int MT>
struct PaSoftmax {
    float row_max[MT][PA_MMA_C_ROWS];  // running maximum of the scaled scores (log2 units)
    float row_sum[MT][PA_MMA_C_ROWS];  // this lane's partial sums over its score columns
    float rescale[MT][PA_MMA_C_ROWS];  // factor for the output rows after the last tile (1 when the maximum held)
};

template <int MT>
PA_DEVICE void pa_softmax_init(PaSoftmax<MT>& sm) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
            sm.row_max[mt][r] = pa_neg_inf();
            sm.row_sum[mt][r] = 0.f;
        }
}

// The keys [begin, end) one query row sees (pa_mask.cuh).
struct PaKeyRange {
    int begin, end;
};
// MASKED: the tile holds keys some rows do not see, which score -inf. keys(row) gives a row's PaKeyRange. A masked
// score needs no test of its own after that: scale_log2 is positive (the host makes it at least the smallest normal
// float), so its exponent is -inf and its probability 0.
template <bool MASKED, int MT, int SN, class Keys, class Mod>
PA_DEVICE bool pa_softmax_tile_masked(pa_mma_c (&s)[MT][SN], PaSoftmax<MT>& sm, const Keys& keys, const Mod& mod,
                                      float scale_log2, int row0, int n0) {
    constexpr bool MOD = PaModActive<Mod>::value;
    const float mul = MOD ? 1.f : scale_log2;  // modified scores are logits in log2 units already
    const int key0 = n0 + pa_mma_c_col(0);     // this lane's first key; its others lie a constant step further
    constexpr int N = SN * PA_MMA_C_COLS;      // this lane's scores of a row
    constexpr int CHAINS = N < PA_SOFTMAX_CHAINS ? N : PA_SOFTMAX_CHAINS;
    bool any_rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
            const int row = row0 + pa_wave_row<MT>(mt) + pa_mma_c_row(r);
            // The row's visible keys as steps from key0: one comparison with a constant per score.
            int lo = 0, hi = 0;
            if (MASKED) {
                const PaKeyRange range = keys(row);
                lo = range.begin - key0;
                hi = range.end - key0;
            }
            float chain[CHAINS];  // score i goes to chain i % CHAINS (a NaN score moves no maximum, as before)
#pragma unroll
            for (int j = 0; j < SN; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e) {
                    float x = s[mt][j][r * PA_MMA_C_COLS + e];  // (AMD fragments are vectors: no references)
                    const int step = j * PA_MMA_N + pa_mma_c_col(e) - pa_mma_c_col(0);
                    if (MASKED && (step < lo || step >= hi)) {
                        x = pa_neg_inf();
                    } else if constexpr (MOD) {
                        x = pa_logit2(mod, row, key0 + step, x, 1.f);
                    }
                    s[mt][j][r * PA_MMA_C_COLS + e] = x;
                    const int i = j * PA_MMA_C_COLS + e;
                    chain[i % CHAINS] = i < CHAINS ? x : fmaxf(chain[i % CHAINS], x);
                }
            float raw_max = chain[0];
#pragma unroll
            for (int c = 1; c < CHAINS; ++c) raw_max = fmaxf(raw_max, chain[c]);
            raw_max = pa_group_max<PA_MMA_ROW_LANES>(raw_max);
            const float tile_max = raw_max * mul;  // -inf where the row saw no key
            float& m = sm.row_max[mt][r];
            sm.rescale[mt][r] = 1.f;
            if (tile_max > m + PA_SOFTMAX_RESCALE_SLACK) {
                sm.rescale[mt][r] = pa_exp2(m - tile_max);
                sm.row_sum[mt][r] *= sm.rescale[mt][r];
                m = tile_max;
                any_rescale = true;
            }
            const float base = m == pa_neg_inf() ? 0.f : m;  // all masked so far
#pragma unroll
            for (int j = 0; j < SN; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e) {
                    const float prob = pa_exp2(fmaf(s[mt][j][r * PA_MMA_C_COLS + e], mul, -base));
                    s[mt][j][r * PA_MMA_C_COLS + e] = prob;
                    const int i = j * PA_MMA_C_COLS + e;
                    chain[i % CHAINS] = i < CHAINS ? prob : chain[i % CHAINS] + prob;
                }
            float part = chain[0];
#pragma unroll
            for (int c = 1; c < CHAINS; ++c) part += chain[c];
            sm.row_sum[mt][r] += part;
        }
    }
    return any_rescale;
}

template <int MT, int SN, class Keys, class Mod>
PA_DEVICE bool pa_softmax_tile(pa_mma_c (&s)[MT][SN], PaSoftmax<MT>& sm, const Keys& keys, const Mod& mod,
                               float scale_log2, int row0, int n0, bool masked) {
    if constexpr (PaModActive<Mod>::value) {
        if (!pa_mod_any(mod)) return pa_softmax_tile(s, sm, keys, PaNoScoreMod{}, scale_log2, row0, n0, masked);
    }
    return masked ? pa_softmax_tile_masked<true>(s, sm, keys, mod, scale_log2, row0, n0)
                  : pa_softmax_tile_masked<false>(s, sm, keys, mod, scale_log2, row0, n0);
}

// Scores of the key tile n0 .. n0 + SN * PA_MMA_N - 1 of the rows [row0, row0 + rows) into probabilities;
// per-element masking only where the tile needs it.
template <int MT, int SN, class Mod>
PA_DEVICE bool pa_softmax_tile(pa_mma_c (&s)[MT][SN], PaSoftmax<MT>& sm, const PaMask& mask, const Mod& mod,
                               float scale_log2, int row0, int rows, int n0) {
    return pa_softmax_tile(
        s, sm, [&](int row) { return PaKeyRange{pa_mask_key_begin(mask, row), pa_mask_key_end(mask, row)}; }, mod,
        scale_log2, row0, n0, pa_mask_tile_partial(mask, row0, rows, n0, SN * PA_MMA_N));
}

template <int MT, int ON>
PA_DEVICE void pa_softmax_rescale(pa_mma_c (&acc)[MT][ON], const PaSoftmax<MT>& sm) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r)
#pragma unroll
            for (int j = 0; j < ON; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e) acc[mt][j][r * PA_MMA_C_COLS + e] *= sm.rescale[mt][r];
}

// Per output row of this wave (rows row0 + ...): emit(row, mt, rr, inv, lse).
template <int MT, int ON, class Emit>
PA_DEVICE void pa_softmax_finish(const pa_mma_c (&acc)[MT][ON], const PaSoftmax<MT>& sm, int row0, const Emit& emit) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
            const float total = pa_group_sum<PA_MMA_ROW_LANES>(sm.row_sum[mt][r]);
            const bool seen = total > 0.f;
            emit(row0 + pa_wave_row<MT>(mt) + pa_mma_c_row(r), mt, r, seen ? 1.f / total : 0.f,
                 seen ? pa_row_lse(sm.row_max[mt][r], total) : pa_neg_inf());
        }
    }
}

// Per lane of each wave after the first of its key waves: its output fragments, row maxima and row sums.
template <int MT, int ON>
constexpr int PA_SOFTMAX_MERGE_FLOATS =
    (PA_KEY_WAVES - 1) * (PA_THREADS / PA_KEY_WAVES) * (MT * ON * PA_MMA_C_REGS + 2 * MT * PA_MMA_C_ROWS);

// The key waves that share rows hold partial softmax states over different keys, with the same fragment layout:
// lane by lane, the first wave rescales each state to the larger maximum and adds it (the others' states are then
// unused). Starts and ends with a block barrier, so that scratch may alias buffers the caller is done with.
template <int MT, int ON>
PA_DEVICE void pa_softmax_merge_key_waves(pa_mma_c (&acc)[MT][ON], PaSoftmax<MT>& sm, float* scratch) {
    if constexpr (PA_KEY_WAVES > 1) {
        constexpr int N = MT * ON * PA_MMA_C_REGS + 2 * MT * PA_MMA_C_ROWS;  // floats per lane
        const int kw = pa_key_wave(), lane = pa_lane_id();
        const int group = pa_wave_id() / PA_KEY_WAVES;  // the waves sharing these rows
        auto at = [&](int w, int i) {  // element i of key wave w (>= 1) of this group, lane-interleaved
            return scratch + (((group * (PA_KEY_WAVES - 1) + w - 1) * N + i) * PA_WARP_SIZE + lane);
        };
        __syncthreads();
        if (kw > 0) {
            int i = 0;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
                    *at(kw, i++) = sm.row_max[mt][r];
                    *at(kw, i++) = sm.row_sum[mt][r];
                }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < ON; ++j)
#pragma unroll
                    for (int e = 0; e < PA_MMA_C_REGS; ++e) *at(kw, i++) = acc[mt][j][e];
        }
        __syncthreads();
        if (kw != 0) return;
        for (int w = 1; w < PA_KEY_WAVES; ++w) {
            float mine[MT][PA_MMA_C_ROWS], theirs[MT][PA_MMA_C_ROWS];
            int i = 0;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
                    const float m0 = sm.row_max[mt][r], m1 = *at(w, i++), s1 = *at(w, i++);
                    const float m = fmaxf(m0, m1);
                    mine[mt][r] = m0 == pa_neg_inf() ? 0.f : pa_exp2(m0 - m);
                    theirs[mt][r] = m1 == pa_neg_inf() ? 0.f : pa_exp2(m1 - m);
                    sm.row_max[mt][r] = m;
                    sm.row_sum[mt][r] = sm.row_sum[mt][r] * mine[mt][r] + s1 * theirs[mt][r];
                }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < ON; ++j)
#pragma unroll
                    for (int e = 0; e < PA_MMA_C_REGS; ++e) {
                        const int r = e / PA_MMA_C_COLS;
                        acc[mt][j][e] = acc[mt][j][e] * mine[mt][r] + *at(w, i++) * theirs[mt][r];
                    }
        }
    }
}

// Normalise and store this wave's output rows of the block starting at row0 (rows at or past seqlen_q are skipped);
// `lse` (null: not wanted) receives each row's natural-log LSE at lse[row].
template <int MT, int ON>
PA_DEVICE void pa_softmax_store(const pa_mma_c (&acc)[MT][ON], const PaSoftmax<MT>& sm, pa_elem* o, pa_i64 o_stride,
                                int row0, int seqlen_q, float* lse) {
    pa_softmax_finish(acc, sm, row0, [&](int row, int mt, int r, float inv, float row_lse) {
        if (row >= seqlen_q) return;
        pa_tile_store_row(o + (pa_i64)row * o_stride, acc[mt], r, inv);
        if (lse != nullptr && pa_mma_c_col(0) == 0) lse[row] = row_lse;
    });
}
