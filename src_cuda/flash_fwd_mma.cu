// FlashAttention forward on the matrix units: float16, bfloat16 (PA_BF16) or float32 (PA_F32) inputs, float32
// accumulation and softmax.
//
// The tiles and tile products come from pa_tile.cuh over pa_mma.cuh (NVIDIA mma.sync or Hopper warpgroup MMA, AMD
// MFMA), the online softmax from pa_softmax.cuh and the masks from pa_mask.cuh. One block computes PA_BLOCK_M
// query rows of one (batch, head); each wave owns MT tiles of PA_MMA_M rows. Q stays in shared memory and K and V
// tiles of PA_BLOCK_N keys stream through it, loaded asynchronously (see the two schedules in the kernel). Scores
// stay in registers and become the A operand of P·V directly; online softmax in base 2.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_MIN_BLOCKS (blocks per SM
// the registers must allow), PA_SMEM_BYTES (the dynamic shared memory the host launches with), PA_BF16, PA_F32,
// PA_MMA_WGMMA, PA_MASK_EXT (variable lengths, sliding windows, softcap, ALiBi, attention masks;
// pa_fwd_params.cuh). Only the key tiles some row of the block sees are loaded: a sliding window costs its width.
#include "pa_fwd_params.cuh"
#include "pa_softmax.cuh"
#include "pa_tile.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_THREADS) || \
    !defined(PA_MIN_BLOCKS) || !defined(PA_SMEM_BYTES)
#error "PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_MIN_BLOCKS and PA_SMEM_BYTES must be defined"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;
constexpr int BN = PA_BLOCK_N;
constexpr int NT = PA_THREADS;
constexpr int WAVES = NT / PA_WARP_SIZE;
constexpr int MT = BM / (WAVES * PA_MMA_M);  // row tiles per wave
constexpr int SN = BN / PA_MMA_N;            // score column tiles
constexpr int ON = D / PA_MMA_N;             // output column tiles
constexpr int KV = pa_tile_elems<BN>();      // elements of one K or V buffer

static_assert(NT % PA_WARP_SIZE == 0 && MT >= 1 && BM == WAVES * PA_MMA_M * MT, "bad PA_BLOCK_M / PA_THREADS");
static_assert(SN % PA_MMA_B_TILES == 0 && BN % PA_MMA_K == 0, "unsupported PA_BLOCK_N");
static_assert(D % PA_MMA_K == 0 && ON % PA_MMA_B_TILES == 0, "unsupported PA_HEAD_DIM");
// Q, then PA_TILE_STAGES K and V buffers (warpgroup MMA: plus the slack that aligns them to 1024 bytes).
static_assert(PA_SMEM_BYTES == (int)sizeof(pa_elem) * (pa_tile_elems<BM>() + 2 * PA_TILE_STAGES * KV) +
                                   (PA_MMA_WGMMA ? 1024 - 16 : 0),
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, PA_MIN_BLOCKS) pa_flash_fwd_mma(const PaFwdParams p) {
    extern __shared__ float4 pa_smem4[];
    pa_elem* q_s = pa_tile_base(pa_smem4);     // BM rows
    pa_elem* k_s = q_s + pa_tile_elems<BM>();  // PA_TILE_STAGES tiles of BN rows
    pa_elem* v_s = k_s + PA_TILE_STAGES * KV;  // PA_TILE_STAGES tiles of BN rows

    const PaBlock blk = pa_block_coords(p, BM);
    const int b = blk.b, h = blk.h, h_kv = blk.h_kv, row0 = blk.row0;
    const PaSeq seq = pa_seq(p, b);
    // The key tiles [first, first + n_tiles) that some row of the block sees.
    const int first = pa_mask_rows_key_begin(seq.mask, row0) / BN;
    const int end = row0 < seq.seqlen_q ? (pa_mask_rows_key_end(seq.mask, row0, BM) + BN - 1) / BN : 0;
    const int n_tiles = max(0, end - first);
    const PaMod mod = pa_seq_mod(p, seq, b, h);

    const pa_elem* k = static_cast<const pa_elem*>(p.k) + b * p.k_sb + h_kv * p.k_sh + seq.k_start * p.k_sn;
    const pa_elem* v = static_cast<const pa_elem*>(p.v) + b * p.v_sb + h_kv * p.v_sh + seq.k_start * p.v_sn;
    // Start loading K or V of the block's key tile t (tile first + t) into its buffer.
    const PaTileLoader<BN, true> kv_loader;
    auto load_k = [&](int t) {
        const int n0 = (first + t) * BN;
        kv_loader.start(k_s + t % PA_TILE_STAGES * KV, k + (pa_i64)n0 * p.k_sn, p.k_sn, seq.seqlen_k - n0);
    };
    auto load_v = [&](int t) {
        const int n0 = (first + t) * BN;
        kv_loader.start(v_s + t % PA_TILE_STAGES * KV, v + (pa_i64)n0 * p.v_sn, p.v_sn, seq.seqlen_k - n0);
    };
    PaTileLoader<BM>().start(q_s,
                             static_cast<const pa_elem*>(p.q) + b * p.q_sb + h * p.q_sh + (seq.q_start + row0) * p.q_sn,
                             p.q_sn, seq.seqlen_q - row0);
    load_k(0);

    pa_mma_c acc[MT][ON];
    PaSoftmax<MT> sm;
    pa_softmax_init(sm);
    pa_mma_c_zero(acc);

#if PA_TILE_ASYNC
    {
        // The tile products run on the matrix unit while the waves go on: Q·K^T of tile t and P·V of tile t - 1
        // are started together, and the softmax of tile t overlaps P·V of tile t - 1. K and V have two buffers.
        // Step t (0 .. n_tiles) waits for K of tile t and V of tile t - 1 and starts loading K of tile t + 1 and
        // V of tile t.
        auto next_step = [&](int t) {
            pa_async_wait<0>();
            __syncthreads();  // K of tile t and V of tile t - 1 have landed; every wave is done with the buffers
                              // refilled now (K of tile t - 1, V of tile t - 2)
            if (t + 1 < n_tiles) load_k(t + 1);
            if (t < n_tiles) load_v(t);
            pa_async_commit();
        };
        pa_async_commit();
        pa_mma_a probs[MT][BN / PA_MMA_K];  // P of the previous tile, the left operand of its P·V
        for (int tile = 0; tile < n_tiles; ++tile) {
            next_step(tile);
            pa_mma_c s[MT][SN];
            pa_tile_qk_start<MT, SN, BM, BN>(s, q_s, k_s + tile % PA_TILE_STAGES * KV);
            if (tile > 0) {
                pa_tile_pv_start<MT, ON, BN>(acc, probs, v_s + (tile - 1) % PA_TILE_STAGES * KV);
                pa_tile_wait_scores<1>(s);  // P·V goes on
            } else {
                pa_tile_wait_scores<0>(s);
            }
            const bool any_rescale = pa_softmax_tile(s, sm, seq.mask, mod, p.scale_log2, row0, BM, (first + tile) * BN);
            pa_tile_wait_all(acc);
            if (any_rescale) pa_softmax_rescale(acc, sm);
            pa_tile_to_a(probs, s);
        }
        next_step(n_tiles);
        if (n_tiles > 0) {
            pa_tile_pv_start<MT, ON, BN>(acc, probs, v_s + (n_tiles - 1) % PA_TILE_STAGES * KV);
            pa_tile_wait_all(acc);
        }
    }
#else
    {
        // One K and one V buffer: V of tile t loads while its scores are computed, K of tile t + 1 while its
        // softmax and P·V run.
        pa_async_commit();
        for (int tile = 0; tile < n_tiles; ++tile) {
            pa_async_wait<0>();
            __syncthreads();  // K of this tile has landed; every wave is done with the previous V
            load_v(tile);
            pa_async_commit();
            pa_mma_c s[MT][SN];
            pa_tile_qk<MT, SN, BM, BN>(s, q_s, k_s);
            if (pa_softmax_tile(s, sm, seq.mask, mod, p.scale_log2, row0, BM, (first + tile) * BN))
                pa_softmax_rescale(acc, sm);
            pa_async_wait<0>();
            __syncthreads();  // V of this tile has landed; every wave is done with K
            if (tile + 1 < n_tiles) {
                load_k(tile + 1);
                pa_async_commit();
            }
            pa_tile_pv<MT, ON, BN, SN>(acc, s, v_s);
        }
        if (n_tiles == 0) pa_async_wait<0>();  // no key visible: Q and the first K land before the block ends
    }
#endif

    pa_softmax_store(acc, sm, static_cast<pa_elem*>(p.o) + b * p.o_sb + h * p.o_sh + seq.q_start * p.o_sn, p.o_sn, row0,
                     seq.seqlen_q, p.lse == nullptr ? nullptr : p.lse + b * p.lse_sb + h * p.lse_sh + seq.q_start);
}
