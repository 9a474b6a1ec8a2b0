// FlashAttention forward for Hopper (sm_90a), warp-specialized: float16 or bfloat16 (PA_BF16) inputs, float32
// accumulation and softmax.
//
// A block computes PA_BLOCK_M query rows of one (batch, head) with PA_THREADS / 128 warpgroups. The last warpgroup
// copies: one of its threads issues bulk tensor copies (pa_prelude_tma.cuh) of the block's Q and of each K and V
// tile into PA_TMA_STAGES buffers, each completing on its transaction barrier, and refills a buffer once the
// computing warps have released it: K as soon as its scores are done, V once its P·V is. The copying warpgroup gives
// most of its registers to the others. The other warpgroups compute 64 query rows each on the warpgroup MMA
// (pa_tile.cuh), as the matrix-unit kernel does: Q·K^T of tile t and P·V of tile t - 1 are issued together and the
// softmax of tile t overlaps P·V. Two computing warpgroups take turns issuing their products (two named barriers),
// so that one's softmax runs while the other's products have the unit. Masks: none or causal (the plain build,
// pa_mask.cuh); the maps read past the sequence as zeros, and the softmax masks those keys.
//
// Defined by the host: PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N (64, 80 or 128), PA_THREADS, PA_TMA_STAGES,
// PA_SMEM_BYTES, PA_BF16, PA_MMA_WGMMA (1).
#include "pa_fwd_params.cuh"
#include "pa_softmax.cuh"
#include "pa_tile.cuh"
#include "pa_prelude_tma.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_THREADS) || \
    !defined(PA_TMA_STAGES) || !defined(PA_SMEM_BYTES) || !PA_MMA_WGMMA
#error "PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_TMA_STAGES, PA_SMEM_BYTES and PA_MMA_WGMMA must be defined"
#endif
#if PA_MASK_EXT
#error "the warp-specialized forward takes no mask, or the causal one"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;
constexpr int BN = PA_BLOCK_N;
constexpr int STAGES = PA_TMA_STAGES;
constexpr int CONSUMERS = PA_THREADS / 128 - 1;  // computing warpgroups
constexpr int SN = BN / PA_MMA_N;                // score column tiles
constexpr int ON = D / PA_MMA_N;                 // output column tiles
constexpr int COL_BLOCKS = (D + 63) / 64;        // 64-column blocks of a shared row (one copy each)
constexpr int KV = pa_tile_elems<BN>();          // elements of one K or V buffer
constexpr bool PINGPONG = CONSUMERS == 2;
// Registers per thread after the reallocation (setmaxnreg), out of what the block holds at launch: the launch bound's
// LAUNCH_REGS per thread (ptxas uses them all: the computing warpgroups' code needs more). The copying warpgroup keeps
// few; the computing ones share the rest (240 each for two, 160 for three). Asking for more than the block holds
// would leave a warpgroup waiting forever.
constexpr int LAUNCH_REGS = 65536 / PA_THREADS / 8 * 8;
constexpr int COPY_REGS = 24;
constexpr int MMA_REGS = ((CONSUMERS + 1) * LAUNCH_REGS - COPY_REGS) / CONSUMERS / 8 * 8;

static_assert(CONSUMERS >= 1 && BM == 64 * CONSUMERS, "64 query rows per computing warpgroup");
static_assert(STAGES >= 2, "at least two K and two V buffers");
// Q, STAGES K and V buffers, the barriers (Q, then full K, full V, empty K and empty V, STAGES each), and the slack
// that aligns the tiles to 1024 bytes.
static_assert(PA_SMEM_BYTES ==
                  (int)sizeof(pa_elem) * (pa_tile_elems<BM>() + 2 * STAGES * KV) + 8 * (1 + 4 * STAGES) + 1024 - 16,
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

// The turn barrier of computing warpgroup w (ids 1 and 2; 0 is __syncthreads').
PA_DEVICE int turn_barrier(int w) { return 1 + w; }

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, 1) pa_flash_fwd_ws(const __grid_constant__ PaFwdParams p) {
    extern __shared__ float4 pa_smem4[];
    pa_elem* q_s = pa_tile_base(pa_smem4);     // BM rows
    pa_elem* k_s = q_s + pa_tile_elems<BM>();  // STAGES tiles of BN rows
    pa_elem* v_s = k_s + STAGES * KV;          // STAGES tiles of BN rows
    unsigned long long* q_full = reinterpret_cast<unsigned long long*>(v_s + STAGES * KV);
    unsigned long long* k_full = q_full + 1;         // K of the buffer has landed
    unsigned long long* v_full = k_full + STAGES;    // V of the buffer has landed
    unsigned long long* k_empty = v_full + STAGES;   // every computing warp is done with the buffer's K
    unsigned long long* v_empty = k_empty + STAGES;  // every computing warp is done with the buffer's V

    const PaBlock blk = pa_block_coords(p, BM);
    const int b = blk.b, h = blk.h, row0 = blk.row0;
    const PaSeq seq = pa_seq(p, b);
    const int first = pa_mask_rows_key_begin(seq.mask, row0) / BN;
    const int end = (pa_mask_rows_key_end(seq.mask, row0, BM) + BN - 1) / BN;
    const int n_tiles = max(0, end - first);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        pa_mbar_init(q_full, 1);
        for (int i = 0; i < STAGES; ++i) {
            pa_mbar_init(k_full + i, 1);
            pa_mbar_init(v_full + i, 1);
            pa_mbar_init(k_empty + i, CONSUMERS * 4);
            pa_mbar_init(v_empty + i, CONSUMERS * 4);
        }
        pa_mbar_init_fence();
    }
    __syncthreads();

    if (wg == CONSUMERS) {  // the copying warpgroup
        pa_regs_dec<COPY_REGS>();
        if (threadIdx.x % 128 == 0) {
            // Copy `rows` rows from row `row` of head `head` (this batch) into a tile, completing on `bar`.
            auto copy = [&](pa_elem* tile, int rows, const PaTensorMap* map, int row, int head,
                            unsigned long long* bar) {
                pa_mbar_expect_bytes(bar, rows * COL_BLOCKS * 64 * (int)sizeof(pa_elem));
#pragma unroll
                for (int c = 0; c < COL_BLOCKS; ++c) pa_tma_load4(tile + c * rows * 64, map, c * 64, row, head, b, bar);
            };
            copy(q_s, BM, &p.map_q, (int)seq.q_start + row0, h, q_full);
            for (int t = 0; t < n_tiles; ++t) {
                const int st = t % STAGES, row = (int)seq.k_start + (first + t) * BN;
                if (t >= STAGES) pa_mbar_wait(k_empty + st, (t / STAGES - 1) & 1);
                copy(k_s + st * KV, BN, &p.map_k, row, blk.h_kv, k_full + st);
                if (t >= STAGES) pa_mbar_wait(v_empty + st, (t / STAGES - 1) & 1);
                copy(v_s + st * KV, BN, &p.map_v, row, blk.h_kv, v_full + st);
            }
        }
        return;
    }

    pa_regs_inc<MMA_REGS>();
    const PaMod mod = pa_seq_mod(p, seq, b, h);
    pa_mma_c acc[1][ON];
    PaSoftmax<1> sm;
    pa_softmax_init(sm);
#pragma unroll
    for (int j = 0; j < ON; ++j)
#pragma unroll
        for (int i = 0; i < PA_MMA_C_REGS; ++i) acc[0][j][i] = 0.f;
    pa_mma_a probs[1][BN / PA_MMA_K];  // P of the previous tile, the left operand of its P·V
    // Issue this warpgroup's products in its turn, then hand the turn to the other.
    auto take_turn = [&]() {
        if (PINGPONG) pa_named_sync(turn_barrier(wg), 2 * 128);
    };
    auto pass_turn = [&]() {
        if (PINGPONG) pa_named_arrive(turn_barrier(1 - wg), 2 * 128);
    };
    auto release = [&](unsigned long long* empty, int t) {  // after the products reading tile t's buffer completed
        if (pa_lane_id() == 0) pa_mbar_arrive(empty + t % STAGES);
    };

    pa_mbar_wait(q_full, 0);
    if (PINGPONG && wg == 1 && n_tiles > 0) pa_named_arrive(turn_barrier(0), 2 * 128);  // warpgroup 0 goes first
    for (int tile = 0; tile < n_tiles; ++tile) {
        const int st = tile % STAGES;
        pa_mbar_wait(k_full + st, (tile / STAGES) & 1);
        if (tile > 0) pa_mbar_wait(v_full + (tile - 1) % STAGES, ((tile - 1) / STAGES) & 1);
        pa_mma_c s[1][SN];
        take_turn();
        pa_tile_qk_start<1, SN, BM, BN>(s, q_s, k_s + st * KV);
        if (tile > 0) {
            pa_tile_pv_start<1, ON, BN>(acc, probs, v_s + (tile - 1) % STAGES * KV);
            pa_tile_wait_scores<1>(s);  // P·V goes on
        } else {
            pa_tile_wait_scores<0>(s);
        }
        pass_turn();
        release(k_empty, tile);  // Q·K^T of this tile is done: its K buffer refills while P·V and the softmax run
        const bool any_rescale = pa_softmax_tile(s, sm, seq.mask, mod, p.scale_log2, row0, BM, (first + tile) * BN);
        pa_tile_wait_all(acc);
        if (tile > 0) release(v_empty, tile - 1);
        if (any_rescale) pa_softmax_rescale(acc, sm);
        pa_tile_to_a(probs, s);
    }
    if (n_tiles > 0) {
        pa_mbar_wait(v_full + (n_tiles - 1) % STAGES, ((n_tiles - 1) / STAGES) & 1);
        take_turn();
        pa_tile_pv_start<1, ON, BN>(acc, probs, v_s + (n_tiles - 1) % STAGES * KV);
        pass_turn();
        pa_tile_wait_all(acc);
        if (PINGPONG && wg == 0) pa_named_sync(turn_barrier(0), 2 * 128);  // warpgroup 1's last hand-over
    }
    pa_softmax_store(acc, sm, static_cast<pa_elem*>(p.o) + b * p.o_sb + h * p.o_sh + seq.q_start * p.o_sn, p.o_sn, row0,
                     seq.seqlen_q, p.lse == nullptr ? nullptr : p.lse + b * p.lse_sb + h * p.lse_sh + seq.q_start);
}
