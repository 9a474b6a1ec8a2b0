// Decoding on the matrix units: a few query positions per sequence against its KV cache (contiguous or paged), the
// keys of each (sequence, key/value head) split over blocks (split-KV), the query heads that share a key/value head
// packed into the rows of one tile so that K and V are read once for all of them.
//
// Block x = h_kv + Hk (split + num_splits (row block + row_blocks b)): PA_BLOCK_M packed query rows (pa_decode_params
// .cuh) against the keys [split keys_per_split, ...) of sequence b. K and V tiles stream through PA_STAGES buffers:
// the copies of the next PA_STAGES - 1 tiles are in flight while one is computed (decoding waits on memory). With
// PA_KEY_WAVES > 1 that many waves hold the same rows, each computing its slice of every key tile, and their
// softmax states are merged at the end: more waves per SM stream the same shared buffers. The
// online softmax and the tile products come from the shared headers. With one split the rows are normalised and
// stored as the output; otherwise each block stores its rows normalised by its own sum, and its LSE, for
// flash_decode_combine.cu. A row that sees no key of the split stores zeros and LSE -inf. With a window the splits
// cover only the keys some query position sees.
//
// Bad indices never reach memory: a sequence length outside [0, capacity], a cache_batch_idx or cache_leftpad out of
// range or a page outside the pool turns the block's rows into NaN (the host checks what it can without a device
// sync; this is the backstop). Compiled with PA_MASK_EXT: windows with a left bound, softcap and ALiBi slopes.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_STAGES, PA_MIN_BLOCKS (blocks
// per SM / CU the registers must fit), PA_KEY_WAVES, PA_SMEM_BYTES, PA_BF16, PA_F32, PA_TILE_SWIZZLED (the shared
// tiles' layout, pa_tile.cuh).
#include "pa_decode_params.cuh"
#include "pa_softmax.cuh"
#include "pa_tile.cuh"

#if !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_STAGES) || !defined(PA_MIN_BLOCKS) || \
    !defined(PA_SMEM_BYTES)
#error "PA_BLOCK_M, PA_BLOCK_N, PA_STAGES, PA_MIN_BLOCKS and PA_SMEM_BYTES must be defined by the host"
#endif
#if PA_MMA_WGMMA
#error "the decode kernel runs on the synchronous tile products"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;
constexpr int BN = PA_BLOCK_N;
constexpr int WAVES = PA_THREADS / PA_WARP_SIZE;
constexpr int KW = PA_KEY_WAVES;
constexpr int BNW = BN / KW;  // keys of a tile per key wave
constexpr int MT = BM / (WAVES / KW * PA_MMA_M);
constexpr int SN = BNW / PA_MMA_N;
constexpr int ON = D / PA_MMA_N;
constexpr int STAGES = PA_STAGES;        // K / V tile pairs in shared memory
constexpr int KV = pa_tile_elems<BN>();  // elements of one K or V tile
static_assert(STAGES >= 1 && STAGES <= 4, "PA_STAGES must be 1..4");
static_assert(PA_THREADS % PA_WARP_SIZE == 0 && WAVES % KW == 0 && MT >= 1 && BM == WAVES / KW * PA_MMA_M * MT,
              "bad PA_BLOCK_M / PA_THREADS / PA_KEY_WAVES");
static_assert(BN % KW == 0 && SN % PA_MMA_B_TILES == 0 && BNW % PA_MMA_K == 0, "unsupported PA_BLOCK_N");
static_assert(D % PA_MMA_K == 0 && ON % PA_MMA_B_TILES == 0, "unsupported PA_HEAD_DIM");
// Q, STAGES K and V tiles.
static_assert(PA_SMEM_BYTES == (int)sizeof(pa_elem) * (pa_tile_elems<BM>() + 2 * STAGES * KV),
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");
// The key waves' states are merged through the K and V buffers.
static_assert(PA_SOFTMAX_MERGE_FLOATS<MT, D / PA_MMA_N> * (int)sizeof(float) <= 2 * STAGES * KV * (int)sizeof(pa_elem),
              "the key waves' softmax states do not fit the K and V buffers");

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, PA_MIN_BLOCKS) pa_flash_decode_mma(const PaDecodeParams p) {
    pa_wait_prior_grid();    // the previous kernel may write q, the cache or the lengths
    pa_release_next_grid();  // the combine's blocks may be placed once all of these are
    extern __shared__ float4 pa_smem4[];
    pa_elem* q_s = pa_tile_base(pa_smem4);
    pa_elem* k_s = q_s + pa_tile_elems<BM>();
    pa_elem* v_s = k_s + STAGES * KV;

    // Consecutive blocks take the heads of one key range: blocks that run together read whole cache rows.
    const int h_kv = blockIdx.x % p.heads_kv;
    const int split = blockIdx.x / p.heads_kv % p.num_splits;
    const int row_block = blockIdx.x / p.heads_kv / p.num_splits % p.row_blocks;
    const int b = blockIdx.x / p.heads_kv / p.num_splits / p.row_blocks;
    const int group = p.heads_q / p.heads_kv;
    const int rows = group * p.seqlen_q, row0 = row_block * BM;

    const PaDecodeSeq seq = pa_decode_seq(p, b);
    bool bad = seq.keys < 0;
    const int keys = bad ? 0 : seq.keys;
#if PA_MASK_EXT
    const int left = p.window_left;
#else
    const int left = PA_MASK_NONE;
#endif
    const PaMask mask{keys, keys - p.seqlen_q, left, p.window_right};
    // The keys some query position sees, split in runs of keys_per_split; this block takes [n_begin, n_end).
    const int n_begin = pa_mask_key_begin(mask, 0) + split * p.keys_per_split;
    const int n_end = min(pa_mask_key_end(mask, p.seqlen_q - 1), n_begin + p.keys_per_split);
    // Packed row r is query position r % Nq of head h_kv G + r / Nq.
    auto keys_of = [&](int r) {
        const int i = r % p.seqlen_q;
        return PaKeyRange{pa_mask_key_begin(mask, i), min(n_end, pa_mask_key_end(mask, i))};
    };
    // Every row sees the keys [all_begin, all_end): tiles inside need no masking.
    const int all_begin = pa_mask_key_begin(mask, p.seqlen_q - 1), all_end = min(n_end, pa_mask_key_end(mask, 0));
#if PA_MASK_EXT
    const bool modded = p.softcap > 0.f || p.alibi_slopes != nullptr;
    const PaScoreMod plain_mod{p.scale, p.softcap, 0.f, mask.offset, nullptr, 0, 0, p.seqlen_q};
    auto logit2 = [&](int r, int key, float x) {  // the score modifiers of packed row r's head
        PaScoreMod mod = plain_mod;
        if (p.alibi_slopes != nullptr && r < rows)
            mod.alibi_slope = p.alibi_slopes[b * p.alibi_sb + h_kv * group + r / p.seqlen_q];
        return pa_logit2(mod, r % p.seqlen_q, key, x, 0.f);
    };
#endif

    auto q_row = [&](int r) {
        const int r_abs = row0 + r;
        return static_cast<const pa_elem*>(p.q) + b * p.q_sb + (pa_i64)(r_abs % p.seqlen_q) * p.q_sn +
               (pa_i64)(h_kv * group + r_abs / p.seqlen_q) * p.q_sh;
    };
    const PaTileLoader<BN> kv_loader;
    // Start copying K and V of the tile at key n0 into buffer `slot` (one commit group).
    auto load_tile = [&](int n0, int slot) {
        const int size = (int)sizeof(pa_elem);
        kv_loader.start_pair_once(
            k_s + slot * KV, v_s + slot * KV,
            [&](int r) { return pa_decode_locate(p, seq.cache_b, seq.first + n0 + r, bad); },
            [&](PaCacheAt at) {
                return static_cast<const pa_elem*>(pa_decode_cache_row(p.k, p.k_sb, p.k_sn, p.k_sh, size, at, h_kv));
            },
            [&](PaCacheAt at) {
                return static_cast<const pa_elem*>(pa_decode_cache_row(p.v, p.v_sb, p.v_sn, p.v_sh, size, at, h_kv));
            },
            n_end - n0);
    };

    PaTileLoader<BM>().start_rows(q_s, q_row, rows - row0);
    const int tiles = n_begin < n_end ? (n_end - n_begin + BN - 1) / BN : 0;
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {  // the first STAGES - 1 tiles (the Q copies join the first group)
        if (t < tiles) load_tile(n_begin + t * BN, t);
        pa_async_commit();
    }

    pa_mma_c acc[MT][ON];
    PaSoftmax<MT> sm;
    pa_softmax_init(sm);
    pa_mma_c_zero(acc);

    for (int t = 0; t < tiles; ++t) {
        const int n0 = n_begin + t * BN, slot = t % STAGES;
        if constexpr (STAGES == 1) {
            __syncthreads();  // every wave is done with the buffer
            load_tile(n0, 0);
            pa_async_commit();
            pa_async_wait<0>();
        } else {
            pa_async_wait<STAGES - 2>();  // tile t has landed (later tiles may still be in flight)
        }
        __syncthreads();  // tile t is visible to every wave; every wave is done with tile t - 1
        if (STAGES > 1) {
            if (t + STAGES - 1 < tiles) load_tile(n0 + (STAGES - 1) * BN, (t + STAGES - 1) % STAGES);
            pa_async_commit();  // an empty group past the last tile keeps the wait count right
        }
        const int sub = pa_key_wave() * BNW, n0w = n0 + sub;  // this wave's keys of the tile
        pa_mma_c s[MT][SN];
        pa_tile_qk<MT, SN, BM, BN>(s, q_s, k_s + slot * KV, sub);
        const bool masked = n0w < all_begin || n0w + BNW > all_end;
        bool rescale;
#if PA_MASK_EXT
        if (modded)
            rescale = pa_softmax_tile(s, sm, keys_of, logit2, p.scale_log2, row0, n0w, masked);
        else
#endif
            rescale = pa_softmax_tile(s, sm, keys_of, PaNoScoreMod{}, p.scale_log2, row0, n0w, masked);
        if (rescale) pa_softmax_rescale(acc, sm);
        pa_tile_pv<MT, ON, BNW, SN, BN>(acc, s, v_s + slot * KV, sub);
    }
    pa_async_wait<0>();
    bad = __syncthreads_or(bad);
    pa_softmax_merge_key_waves(acc, sm, reinterpret_cast<float*>(k_s));
    if (pa_key_wave() != 0) return;

    const float nan = __int_as_float(0x7fc00000);
    const pa_i64 q_rows = (pa_i64)p.heads_q * p.seqlen_q;  // per sequence, in [Hq][Nq] order
    pa_softmax_finish(acc, sm, row0, [&](int r, int mt, int rr, float inv, float lse) {
        if (r >= rows) return;
        const int i = r % p.seqlen_q, h = h_kv * group + r / p.seqlen_q;
        const pa_i64 lse_at = (pa_i64)b * q_rows + (pa_i64)h * p.seqlen_q + i;
        if (bad) {
            inv = nan;
            lse = nan;
        }
        if (p.num_splits == 1) {
            pa_elem* o = static_cast<pa_elem*>(p.o) + b * p.o_sb + (pa_i64)i * p.o_sn + (pa_i64)h * p.o_sh;
            pa_tile_store_row(o, acc[mt], rr, inv);
            if (p.lse != nullptr && pa_mma_c_col(0) == 0) p.lse[lse_at] = lse;
        } else {
            const pa_i64 part = (pa_i64)split * p.batch * q_rows + lse_at;
            pa_tile_store_row_f32(p.o_part + part * D, acc[mt], rr, inv);
            if (pa_mma_c_col(0) == 0) p.lse_part[part] = lse;
        }
    });
}
