// FlashAttention forward on the matrix units: float16, bfloat16 (PA_BF16) or float32 (PA_F32) inputs, float32
// accumulation and softmax.
//
// The tiles and tile products come from pa_mma.cuh (NVIDIA mma.sync or Hopper warpgroup MMA, AMD MFMA). One block
// computes PA_BLOCK_M query rows of one (batch, head); each wave owns MT tiles of PA_MMA_M rows. Q stays in shared
// memory and K and V tiles of PA_BLOCK_N keys stream through it, loaded asynchronously (see the two schedules in
// the kernel). Scores stay in registers and become the A operand of P·V directly; online softmax in base 2.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_MIN_BLOCKS (blocks per SM
// the registers must allow), PA_PERSISTENT (blocks loop over work items), PA_BF16, PA_F32, PA_MMA_WGMMA.
#include "pa_mma.cuh"
#include "pa_params.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_THREADS) || \
    !defined(PA_MIN_BLOCKS) || !defined(PA_PERSISTENT)
#error "PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_MIN_BLOCKS and PA_PERSISTENT must be defined by the host"
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
constexpr int CHUNKS = D / PA_TILE_CHUNK;    // 16-byte chunks per row

constexpr bool PERSISTENT = PA_PERSISTENT;  // blocks loop over work items (see work_item)
constexpr float RESCALE_SLACK = 8.f;         // log2 units: probabilities stay <= 256, fine for float16 operands

static_assert(NT % PA_WARP_SIZE == 0 && MT >= 1 && BM == WAVES * PA_MMA_M * MT, "bad PA_BLOCK_M / PA_THREADS");
static_assert(SN % PA_MMA_B_TILES == 0 && BN % PA_MMA_K == 0, "unsupported PA_BLOCK_N");
static_assert(D % PA_MMA_K == 0 && ON % PA_MMA_B_TILES == 0, "unsupported PA_HEAD_DIM");

// Copies of ROWS x D tiles into shared memory, 16 bytes per copy, spread over the block's threads. With few copies
// per thread their offsets are computed once and kept (each tile then costs a few instructions per copy); with many
// they are recomputed, which saves the registers.
template <int ROWS>
struct TileLoader {
    static constexpr int TOTAL = ROWS * CHUNKS;
    static constexpr int COPIES = (TOTAL + NT - 1) / NT;  // per thread (the last round may be partial)
    static constexpr bool KEEP = COPIES <= 4;
    static constexpr int KEPT = KEEP ? COPIES : 1;
    int smem[KEPT], row[KEPT], col[KEPT];

    PA_DEVICE TileLoader() {
#pragma unroll
        for (int i = 0; i < KEPT; ++i) {
            const int idx = (int)threadIdx.x + i * NT;
            row[i] = idx / CHUNKS;
            col[i] = idx % CHUNKS * PA_TILE_CHUNK;
            smem[i] = row[i] < ROWS ? pa_tile_offset<ROWS>(row[i], col[i]) : 0;
        }
    }
    // Start copying rows of `src` (row stride `stride`); rows at or past `valid` become zeros.
    PA_DEVICE void start(pa_elem* tile, const pa_elem* src, pa_i64 stride, int valid) const {
        if constexpr (KEEP) {
#pragma unroll
            for (int i = 0; i < COPIES; ++i) {
                if (TOTAL % NT != 0 && i == COPIES - 1 && (int)threadIdx.x >= TOTAL - i * NT) break;
                const bool ok = row[i] < valid;
                pa_async_copy16(tile + smem[i], ok ? src + row[i] * stride + col[i] : src, ok);
            }
        } else {
            for (int idx = threadIdx.x; idx < TOTAL; idx += NT) {
                const int r = idx / CHUNKS, c = idx % CHUNKS * PA_TILE_CHUNK;
                const bool ok = r < valid;
                pa_async_copy16(tile + pa_tile_offset<ROWS>(r, c), ok ? src + r * stride + c : src, ok);
            }
        }
    }
};

struct Softmax {
    float row_max[MT][PA_MMA_C_ROWS];  // running maximum of the scaled scores (log2 units)
    float row_sum[MT][PA_MMA_C_ROWS];  // this lane's partial sums over its score columns
    float rescale[MT][PA_MMA_C_ROWS];  // factor for the output rows after the last tile (1 when the maximum held)
};

// Online softmax (base 2) of one score tile: the scores in `s` become probabilities, the running maxima and sums
// move, and `sm.rescale` holds the factors the output rows need; returns whether any of them is not 1. The scale
// (>= 0, the host makes it so) is folded into the exponent's multiply-add. MASKED: the tile holds keys some rows do
// not see (causal diagonal, keys past the end), which score -inf.
template <bool MASKED>
PA_DEVICE bool softmax_tile(pa_mma_c (&s)[MT][SN], Softmax& sm, const PaFwdParams& p, int row0, int n0) {
    bool any_rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
            int key_end = 0;  // keys visible to the row end here
            if (MASKED) {
                const int row = row0 + pa_wave_row<MT>(mt) + pa_mma_c_row(r);
                key_end = p.causal ? min(p.seqlen_k, row + 1) : p.seqlen_k;
            }
            float raw_max = pa_neg_inf();
#pragma unroll
            for (int j = 0; j < SN; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e) {
                    if (MASKED && n0 + j * PA_MMA_N + pa_mma_c_col(e) >= key_end)
                        s[mt][j][r * PA_MMA_C_COLS + e] = pa_neg_inf();
                    raw_max = fmaxf(raw_max, s[mt][j][r * PA_MMA_C_COLS + e]);
                }
            raw_max = pa_group_max<PA_MMA_ROW_LANES>(raw_max);
            const float tile_max = raw_max == pa_neg_inf() ? raw_max : raw_max * p.scale_log2;
            // The running maximum moves only when a score exceeds it by more than RESCALE_SLACK: until then
            // probabilities stay below 2^RESCALE_SLACK and the output and sums need no rescaling.
            float& m = sm.row_max[mt][r];
            sm.rescale[mt][r] = 1.f;
            if (tile_max > m + RESCALE_SLACK) {
                sm.rescale[mt][r] = pa_exp2(m - tile_max);
                sm.row_sum[mt][r] *= sm.rescale[mt][r];
                m = tile_max;
                any_rescale = true;
            }
            const float base = m == pa_neg_inf() ? 0.f : m;  // all masked so far
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < SN; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e) {
                    const float x = s[mt][j][r * PA_MMA_C_COLS + e];
                    const float prob = MASKED && x == pa_neg_inf() ? 0.f : pa_exp2(fmaf(x, p.scale_log2, -base));
                    s[mt][j][r * PA_MMA_C_COLS + e] = prob;
                    part += prob;
                }
            sm.row_sum[mt][r] += part;
        }
    }
    return any_rescale;
}

// Scores of tile n0 .. n0 + BN - 1 into probabilities (see softmax_tile).
PA_DEVICE bool softmax(pa_mma_c (&s)[MT][SN], Softmax& sm, const PaFwdParams& p, int row0, int n0) {
    const bool masked = n0 + BN > p.seqlen_k || (p.causal && n0 + BN - 1 > row0);
    return masked ? softmax_tile<true>(s, sm, p, row0, n0) : softmax_tile<false>(s, sm, p, row0, n0);
}

PA_DEVICE void rescale_output(pa_mma_c (&acc)[MT][ON], const Softmax& sm) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r)
#pragma unroll
            for (int j = 0; j < ON; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e) acc[mt][j][r * PA_MMA_C_COLS + e] *= sm.rescale[mt][r];
}

// Work item `pass` of this block: its own index first; with PA_PERSISTENT (a grid of fewer blocks than items) one
// more per pass over the grid, every other pass in reverse grid order, which pairs heavy and light causal items.
// The next item's Q and first K tile load while the current item finishes.
PA_DEVICE pa_i64 work_item(int pass) {
    const pa_i64 g = gridDim.x;
    return pass * g + (pass % 2 ? g - 1 - blockIdx.x : blockIdx.x);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, PA_MIN_BLOCKS) pa_flash_fwd_mma(const PaFwdParams p) {
    extern __shared__ float4 pa_smem4[];
    constexpr int KV = pa_tile_elems<BN>();
    pa_elem* q_s = pa_tile_base(pa_smem4);          // BM rows
    pa_elem* k_s = q_s + pa_tile_elems<BM>();       // PA_TILE_STAGES tiles of BN rows
    pa_elem* v_s = k_s + PA_TILE_STAGES * KV;       // PA_TILE_STAGES tiles of BN rows

    const pa_i64 works = (pa_i64)p.num_m_blocks * p.batch * p.heads_q;
    const TileLoader<BN> kv_loader;
    // Start loading Q and the first K tile of work item w.
    auto start_item = [&](pa_i64 w) {
        const PaBlock item = pa_block_coords(p, BM, (int)w);
        TileLoader<BM>().start(q_s, static_cast<const pa_elem*>(p.q) + item.b * p.q_sb + item.h * p.q_sh +
                                        (pa_i64)item.row0 * p.q_sn, p.q_sn, p.seqlen_q - item.row0);
        kv_loader.start(k_s, static_cast<const pa_elem*>(p.k) + item.b * p.k_sb + item.h_kv * p.k_sh, p.k_sn,
                        p.seqlen_k);
    };
    start_item(work_item(0));  // the block's own item (the grid never has more blocks than items)
    for (int pass = 0; pass == 0 || PERSISTENT; ++pass) {
        const pa_i64 work = work_item(pass), next = work_item(pass + 1);
        if (PERSISTENT && work >= works) break;
        const bool has_next = PERSISTENT && next < works;
        const PaBlock blk = pa_block_coords(p, BM, (int)work);
        const int b = blk.b, h = blk.h, h_kv = blk.h_kv, row0 = blk.row0;

        const pa_elem* k = static_cast<const pa_elem*>(p.k) + b * p.k_sb + h_kv * p.k_sh;
        const pa_elem* v = static_cast<const pa_elem*>(p.v) + b * p.v_sb + h_kv * p.v_sh;
        // Start loading K or V of tile t into its buffer.
        auto load_k = [&](int t) {
            kv_loader.start(k_s + t % PA_TILE_STAGES * KV, k + (pa_i64)t * BN * p.k_sn, p.k_sn, p.seqlen_k - t * BN);
        };
        auto load_v = [&](int t) {
            kv_loader.start(v_s + t % PA_TILE_STAGES * KV, v + (pa_i64)t * BN * p.v_sn, p.v_sn, p.seqlen_k - t * BN);
        };

        const int n_end = p.causal ? min(p.seqlen_k, row0 + BM) : p.seqlen_k;
        const int n_tiles = (n_end + BN - 1) / BN;

        pa_mma_c acc[MT][ON];
        Softmax sm;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
                sm.row_max[mt][r] = pa_neg_inf();
                sm.row_sum[mt][r] = 0.f;
            }
#pragma unroll
            for (int j = 0; j < ON; ++j)
#pragma unroll
                for (int i = 0; i < PA_MMA_C_REGS; ++i) acc[mt][j][i] = 0.f;
        }

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
                if (t == n_tiles && has_next) start_item(next);  // Q and K are free: the next item's start
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
                const bool any_rescale = softmax(s, sm, p, row0, tile * BN);
                pa_tile_wait_all(acc);
                if (any_rescale) rescale_output(acc, sm);
                pa_tile_to_a(probs, s);
            }
            next_step(n_tiles);
            pa_tile_pv_start<MT, ON, BN>(acc, probs, v_s + (n_tiles - 1) % PA_TILE_STAGES * KV);
            pa_tile_wait_all(acc);
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
                if (softmax(s, sm, p, row0, tile * BN)) rescale_output(acc, sm);
                pa_async_wait<0>();
                __syncthreads();  // V of this tile has landed; every wave is done with K
                if (tile + 1 < n_tiles) {
                    load_k(tile + 1);
                    pa_async_commit();
                } else if (has_next) {
                    start_item(next);  // Q and K are free: the next item's start
                    pa_async_commit();
                }
                pa_tile_pv<MT, ON, BN, SN>(acc, s, v_s);
            }
        }
#endif

        pa_elem* o = static_cast<pa_elem*>(p.o) + b * p.o_sb + h * p.o_sh;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
                const int row = row0 + pa_wave_row<MT>(mt) + pa_mma_c_row(r);
                const float total = pa_group_sum<PA_MMA_ROW_LANES>(sm.row_sum[mt][r]);
                if (row >= p.seqlen_q) continue;
                pa_tile_store_row(o + (pa_i64)row * p.o_sn, acc[mt], r, 1.f / total);
                if (p.lse != nullptr && pa_mma_c_col(0) == 0) {
                    const float base = sm.row_max[mt][r] == pa_neg_inf() ? 0.f : sm.row_max[mt][r];
                    p.lse[((pa_i64)b * p.heads_q + h) * p.seqlen_q + row] = (base + pa_log2(total)) * PA_LN2;
                }
            }
        }
    }
}
