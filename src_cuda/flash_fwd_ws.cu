// FlashAttention forward for Hopper (sm_90a), warp-specialized: float16 or bfloat16 (PA_BF16) inputs, float32
// accumulation and softmax; or float32 inputs (PA_F32) as three TF32 products on the warpgroup MMA.
//
// Blocks are persistent (one per SM): a block takes units of work in turn (pa_unit_block), and each of its jobs is
// PA_BLOCK_M query rows of one (batch, head), computed with PA_THREADS / 128 warpgroups. The first PA_BLOCK_M / 64
// compute, the rest copy. One thread of the first copying warpgroup issues bulk tensor copies (pa_prelude_tma.cuh) of
// each job's Q into PA_Q_STAGES buffers and of each K and V tile into PA_TMA_STAGES buffers, each completing on its
// transaction barrier, and refills a buffer once the computing warps have released it: K as soon as its scores are
// done, V once its P·V is, Q after the job's last Q·K^T; so the next job's copies overlap the end of the current one.
// The copying warpgroups give most of their registers to the others. The computing warpgroups take 64 query rows each
// on the warpgroup MMA (pa_tile.cuh), as the matrix-unit kernel does: Q·K^T of tile t and P·V of tile t - 1 are issued
// together and the softmax of tile t overlaps P·V. Two computing warpgroups take turns issuing their products (two
// named barriers), so that one's softmax runs while the other's products have the unit. A warpgroup computes only the
// key tiles its own rows see: under a causal mask the first warpgroups skip the job's last tiles, above their rows'
// diagonal (they only release those buffers), and the second of two then takes its remaining turns alone. Masks: none
// or causal (the plain build, pa_mask.cuh); with PA_MASK_EXT (built without the score modifiers, PA_SCORE_MOD 0) also
// windows and packed sequences. The maps read past the tensors' ends as zeros, past a packed sequence's end the next
// sequence's rows: the softmax masks those keys, and their V rows are zeroed before P·V (whatever they hold, NaN
// included, adds nothing); query rows past a sequence's end are not stored. With PA_STORE_O_BULK (16-bit, two Q
// buffers or more) a computing warpgroup writes its normalized output rows into its rows of the job's Q buffer (matrix
// stores) and one of its threads stores them with bulk tensor copies, which clip the rows past the end; that thread
// releases the buffer once the copies have read it, after the next job's first Q·K^T, so the stores run behind the next
// job's first products. (The maps clip rows only at the packed tensors' end: the threads store a packed sequence's last
// rows from the buffer themselves.)
//
// float32: the unit reads split tiles (pa_tile.cuh). The copying warpgroups' other warps make them: each K tile is
// split in place into its TF32 part and a second tile of the rest, and each V tile, copied into one of two landing
// buffers, is written transposed into its two parts. The computing warpgroups wait for those (the ready barriers)
// instead of the copies, and split their own Q rows before the first tile. P·V of a tile is summed apart and added to
// the output in the registers (the unit's accumulation truncates).
//
// Defined by the host: PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N (32, 64, 80, 128 or 160; float32: 32 or 64), PA_THREADS,
// PA_TMA_STAGES, PA_Q_STAGES (one to four Q buffers: with n, the copies of the next n - 1 jobs' Q, and of their K and
// V behind each, may start before the current job's last Q·K^T),
// PA_STORE_O_BULK, PA_SMEM_BYTES, PA_BF16 or PA_F32, PA_MMA_WGMMA (1); PA_MASK_EXT with PA_SCORE_MOD 0.
#include "pa_fwd_params.cuh"
#include "pa_softmax.cuh"
#include "pa_tile.cuh"
#include "pa_prelude_tma.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_THREADS) ||            \
    !defined(PA_TMA_STAGES) || !defined(PA_Q_STAGES) || !defined(PA_STORE_O_BULK) || !defined(PA_SMEM_BYTES) || \
    !PA_MMA_WGMMA
#error "the host defines PA_HEAD_DIM, PA_BLOCK_*, PA_THREADS, the stages, PA_STORE_O_BULK, PA_SMEM_BYTES, PA_MMA_WGMMA"
#endif
#if PA_SCORE_MOD
#error "the warp-specialized forward takes no score modifiers (softcap, ALiBi, mask tensors)"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;
constexpr int BN = PA_BLOCK_N;
constexpr int STAGES = PA_TMA_STAGES;
constexpr int Q_STAGES = PA_Q_STAGES;
constexpr int CONSUMERS = BM / 64;                           // computing warpgroups
constexpr int COPIERS = PA_THREADS / 128 - CONSUMERS;        // copying warpgroups
constexpr int SN = BN / PA_MMA_N;                            // score column tiles
constexpr int ON = D / PA_MMA_N;                             // output column tiles
constexpr int ROW_ELEMS = PA_TILE_ROW_ELEMS;                 // elements of a 128-byte shared row
constexpr int COL_BLOCKS = (D + ROW_ELEMS - 1) / ROW_ELEMS;  // column blocks of a shared row (one copy each)
constexpr int KV = pa_tile_elems<BN>();                      // elements of one K or V tile
constexpr bool F32 = PA_F32;
constexpr int PARTS = F32 ? 2 : 1;      // tiles per operand: float32 splits each into a TF32 part and the rest
constexpr int V_LANDING = F32 ? 2 : 0;  // float32: V tiles land here and are written transposed into their stage
// float32: the copying warpgroups' threads that split and transpose (all but the first warp, which copies)
constexpr int CONVERTERS = F32 ? COPIERS * 128 - PA_WARP_SIZE : 0;
constexpr int BARRIERS = 2 * Q_STAGES + 4 * STAGES + (F32 ? 2 * STAGES + 2 * V_LANDING : 0);
constexpr bool PINGPONG = CONSUMERS == 2;
constexpr bool O_BULK = PA_STORE_O_BULK;  // the output leaves through the Q buffer, with bulk tensor stores
static_assert(!O_BULK || (!F32 && Q_STAGES >= 2), "bulk output stores: 16-bit inputs and at least two Q buffers");
// Registers per thread after the reallocation (setmaxnreg), out of what the block holds at launch: the launch bound's
// LAUNCH_REGS per thread (ptxas uses them all: the computing warpgroups' code needs more). The copying warpgroups keep
// few; the computing ones share the rest, at most 256 each (240 each for two, 160 for three). Asking for more than
// the block holds would leave a warpgroup waiting forever. A block of 256 threads holds 256 registers per thread at
// launch: every warpgroup keeps what it has.
constexpr int LAUNCH_REGS = pa_launch_regs(PA_THREADS);
constexpr int COPY_REGS = F32 ? 56 : 24;  // float32: the splitting threads hold a few tiles' addresses
constexpr int MMA_REGS_SHARE = (PA_THREADS / 128 * LAUNCH_REGS - COPIERS * COPY_REGS) / CONSUMERS / 8 * 8;
constexpr int MMA_REGS = MMA_REGS_SHARE < 256 ? MMA_REGS_SHARE : 256;
constexpr bool REALLOCATE = PA_THREADS > 256;

static_assert(!REALLOCATE || CONSUMERS * MMA_REGS + COPIERS * COPY_REGS <= PA_THREADS / 128 * LAUNCH_REGS,
              "the warpgroups ask for more registers than the block holds: setmaxnreg would wait forever");
static_assert(CONSUMERS >= 1 && BM == 64 * CONSUMERS, "64 query rows per computing warpgroup");
static_assert(COPIERS == 1 || (F32 && COPIERS <= 3), "one copying warpgroup (float32: up to three)");
static_assert(STAGES >= 2, "at least two K and two V buffers");
static_assert(Q_STAGES >= 1 && Q_STAGES <= 4, "one to four Q buffers");
static_assert(!F32 || (BN % PA_WARP_SIZE == 0 && D % PA_TILE_CHUNK == 0), "float32 V tiles are transposed by warps");
// Q_STAGES Q buffers, STAGES K and V buffers (each as PARTS tiles), the V landing buffers, the barriers (full and empty
// Q, Q_STAGES each, then full K, full V, empty K and empty V, STAGES each; float32: ready K and ready V, STAGES each,
// and full and empty landing buffers), and the slack that aligns the tiles to 1024 bytes.
static_assert(PA_SMEM_BYTES == (int)sizeof(pa_elem) * (Q_STAGES * PARTS * pa_tile_elems<BM>() +
                                                       (2 * PARTS * STAGES + V_LANDING) * KV) +
                                   8 * BARRIERS + 1024 - 16,
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

// The turn barrier of computing warpgroup w (ids 1 and 2; 0 is __syncthreads'), and its own barrier (3, 4).
PA_DEVICE int turn_barrier(int w) { return 1 + w; }
PA_DEVICE int group_barrier(int w) { return 3 + w; }

#if PA_F32
// float32, one of the CONVERTERS threads (`id`): split the K tiles in place and transpose the V tiles into their
// stages, tile by tile, for the computing warpgroups: the block's tiles [tiles, tiles + n_tiles), of which the last
// holds `last_keys` keys of the sequence (its V rows past them become zeros).
PA_DEVICE void convert_tiles(int id, int tiles, int n_tiles, int last_keys, pa_elem* k_s, pa_elem* v_s, pa_elem* v_land,
                             unsigned long long* k_full, unsigned long long* k_ready, unsigned long long* v_ready,
                             unsigned long long* v_empty, unsigned long long* land_full,
                             unsigned long long* land_empty) {
    constexpr int WARPS = CONVERTERS / PA_WARP_SIZE;
    constexpr int CHUNKS = KV / PA_TILE_CHUNK;                      // 16-byte chunks of a K tile
    constexpr int TASKS = BN / PA_WARP_SIZE * (D / PA_TILE_CHUNK);  // (key group, column chunk) pairs of a V tile
    const int warp = id / PA_WARP_SIZE, lane = pa_lane_id();
    for (int t = tiles; t < tiles + n_tiles; ++t) {
        const int st = t % STAGES, land = t % V_LANDING;
        pa_elem* k = k_s + st * PARTS * KV;
        pa_mbar_wait(k_full + st, (t / STAGES) & 1);
        // Compile-time trip counts, unrolled: a thread's loads go out together.
#pragma unroll 4
        for (int r = 0; r < (CHUNKS + CONVERTERS - 1) / CONVERTERS; ++r) {
            const int i = (id + r * CONVERTERS) * PA_TILE_CHUNK;
            if (CHUNKS % CONVERTERS == 0 || i < KV) pa_tile_split4(k + i, k + KV + i);
        }
        pa_wgmma_smem_fence();
        pa_mbar_arrive(k_ready + st);

        pa_elem* v = v_s + st * PARTS * KV;
        const pa_elem* in = v_land + land * KV;
        const int keys = t == tiles + n_tiles - 1 ? last_keys : BN;
        pa_mbar_wait(land_full + land, (t / V_LANDING) & 1);
        if (t >= STAGES) pa_mbar_wait(v_empty + st, (t / STAGES - 1) & 1);
#pragma unroll 4
        for (int r = 0; r < (TASKS + WARPS - 1) / WARPS; ++r) {
            const int task = warp + r * WARPS;
            if (TASKS % WARPS != 0 && task >= TASKS) break;
            const int key = task / (D / PA_TILE_CHUNK) * PA_WARP_SIZE + lane,
                      c = task % (D / PA_TILE_CHUNK) * PA_TILE_CHUNK;
            const float4 x = key < keys ? pa_load4(in + pa_tile_offset<BN>(key, c)) : pa_zero4();
            const float xs[4] = {x.x, x.y, x.z, x.w};
            const int col = pa_mma_pv_key_slot(key);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                unsigned big, small;
                pa_tf32_split(xs[e], big, small);
                const int at = pa_tile_offset<D>(c + e, col - col % PA_TILE_CHUNK) + col % PA_TILE_CHUNK;
                v[at] = __uint_as_float(big);
                v[KV + at] = __uint_as_float(small);
            }
        }
        pa_mbar_arrive(land_empty + land);
        pa_wgmma_smem_fence();
        pa_mbar_arrive(v_ready + st);
    }
}
#endif  // PA_F32

// One query block of a persistent block's work: its coordinates, sequence and key tiles [first, first + n_tiles).
struct Job {
    PaBlock blk;
    PaSeq seq;
    int first, n_tiles;
};
// The key tiles that the job's first `rows` rows see: a prefix of the job's [first, first + n_tiles), as the rows' key
// ranges end no earlier from one row to the next.
PA_DEVICE int rows_tiles(const PaMask& m, const Job& j, int rows) {
    return max(0, (pa_mask_rows_key_end(m, j.blk.row0, rows) + BN - 1) / BN - j.first);
}
PA_DEVICE Job job_of(const PaFwdParams& p, int unit, int part) {
    Job j;
    j.blk = pa_unit_block(p, BM, unit, part);
    j.seq = pa_seq(p, j.blk.b);
    j.first = pa_mask_rows_key_begin(j.seq.mask, j.blk.row0) / BN;
    j.n_tiles = rows_tiles(j.seq.mask, j, BM);
    return j;
}
// The mask of a job. In the plain build it is the same for every job, and the softmax reads it from the parameters
// where it is used, which keeps it out of the computing warps' registers.
PA_DEVICE PaMask job_mask(const PaFwdParams& p, const Job& j) {
#if PA_MASK_EXT
    return j.seq.mask;
#else
    return pa_seq(p, 0).mask;
#endif
}
// Whether the call's sequences are packed (cu_seqlens, the extended-mask build): rows of one batch, which the tensor
// maps clip only at the packed tensors' end.
PA_DEVICE bool packed(const PaFwdParams& p) {
#if PA_MASK_EXT
    return p.cu_seqlens_q != nullptr;
#else
    return false;
#endif
}
// The batch coordinate of the job's rows in the tensor maps.
PA_DEVICE int map_batch(const PaFwdParams& p, const Job& j) { return packed(p) ? 0 : j.blk.b; }
// Keys of the job's last key tile within its sequence: BN, but for a packed sequence's last tile, whose rows past them
// the bulk copies fill with the next sequence's.
PA_DEVICE int last_tile_keys(const PaFwdParams& p, const Job& j) {
    return packed(p) ? min(BN, j.seq.seqlen_k - (j.first + j.n_tiles - 1) * BN) : BN;
}
// Whether bulk stores of the job's rows [first, first + 64) stay within its sequence.
PA_DEVICE bool bulk_store_fits(const PaFwdParams& p, const Job& j, int first) {
    return !packed(p) || first + 64 <= j.seq.seqlen_q;
}
// Calls f(job) for each query block of this block's units, in order; packed sequences shorter than the longest have
// no rows in their last query blocks, which are skipped.
template <class F>
PA_DEVICE void for_each_job(const PaFwdParams& p, F&& f) {
    for (int unit = blockIdx.x; unit < p.num_units; unit += gridDim.x)
        for (int part = 0; part < pa_unit_parts(p, unit); ++part) {
            const Job j = job_of(p, unit, part);
            if (!PA_MASK_EXT || j.blk.row0 < j.seq.seqlen_q) f(j);
        }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, 1) pa_flash_fwd_ws(const PA_GRID_CONSTANT PaFwdParams p) {
    extern __shared__ float4 pa_smem4[];
    constexpr int Q_ELEMS = PARTS * pa_tile_elems<BM>();
    pa_elem* q_s = pa_tile_base(pa_smem4);        // Q_STAGES buffers of BM rows (PARTS tiles each)
    pa_elem* k_s = q_s + Q_STAGES * Q_ELEMS;      // STAGES buffers of BN rows (PARTS tiles each)
    pa_elem* v_s = k_s + STAGES * PARTS * KV;     // STAGES buffers of BN rows (float32: transposed)
    pa_elem* v_land = v_s + STAGES * PARTS * KV;  // float32: V_LANDING tiles of BN rows
    unsigned long long* q_full = reinterpret_cast<unsigned long long*>(v_land + V_LANDING * KV);
    unsigned long long* q_empty = q_full + Q_STAGES;  // every computing warp is done with the buffer's Q
    unsigned long long* k_full = q_empty + Q_STAGES;  // K of the buffer has landed
    unsigned long long* v_full = k_full + STAGES;     // V of the buffer has landed (16-bit)
    unsigned long long* k_empty = v_full + STAGES;    // every computing warp is done with the buffer's K
    unsigned long long* v_empty = k_empty + STAGES;   // every computing warp is done with the buffer's V
    // float32: the buffer's split K / transposed V are written; the landing buffer's V has landed / been read. The
    // computing warps wait for the ready barriers, which for 16-bit inputs are the full ones.
    unsigned long long* k_ready = F32 ? v_empty + STAGES : k_full;
    unsigned long long* v_ready = F32 ? k_ready + STAGES : v_full;
    unsigned long long* land_full = v_ready + STAGES;
    unsigned long long* land_empty = land_full + V_LANDING;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int i = 0; i < Q_STAGES; ++i) {
            pa_mbar_init(q_full + i, 1);
            pa_mbar_init(q_empty + i, CONSUMERS * 4);
        }
        for (int i = 0; i < STAGES; ++i) {
            pa_mbar_init(k_full + i, 1);
            pa_mbar_init(v_full + i, 1);
            pa_mbar_init(k_empty + i, CONSUMERS * 4);
            pa_mbar_init(v_empty + i, CONSUMERS * 4);
            if (F32) {
                pa_mbar_init(k_ready + i, CONVERTERS);
                pa_mbar_init(v_ready + i, CONVERTERS);
            }
        }
        for (int i = 0; i < V_LANDING; ++i) {
            pa_mbar_init(land_full + i, 1);
            pa_mbar_init(land_empty + i, CONVERTERS);
        }
        pa_mbar_init_fence();
    }
    __syncthreads();

    // Each role counts the jobs and the K/V tiles it has passed over all of the block's jobs: a tile's buffer and
    // barrier phase follow from its count (tile i: buffer i % STAGES, phase i / STAGES), a job's Q phase from jobs.
    if (wg >= CONSUMERS) {  // the copying warpgroups
        if (REALLOCATE) pa_regs_dec<COPY_REGS>();
        const int copier = threadIdx.x - CONSUMERS * 128;
        if (F32 && copier >= PA_WARP_SIZE) {
#if PA_F32
            int tiles = 0;
            for_each_job(p, [&](const Job& j) {
                convert_tiles(copier - PA_WARP_SIZE, tiles, j.n_tiles, last_tile_keys(p, j), k_s, v_s, v_land, k_full,
                              k_ready, v_ready, v_empty, land_full, land_empty);
                tiles += j.n_tiles;
            });
#endif
        } else if (copier == 0) {
            int jobs = 0, tiles = 0;
            for_each_job(p, [&](const Job& j) {
                // Copy `rows` rows from row `row` of head `head` (this batch) into a tile, completing on `bar`.
                auto copy = [&](pa_elem* tile, int rows, const PaTensorMap* map, int row, int head,
                                unsigned long long* bar) {
                    pa_mbar_expect_bytes(bar, rows * COL_BLOCKS * ROW_ELEMS * (int)sizeof(pa_elem));
#pragma unroll
                    for (int c = 0; c < COL_BLOCKS; ++c)
                        pa_tma_load4(tile + c * rows * ROW_ELEMS, map, c * ROW_ELEMS, row, head, map_batch(p, j), bar);
                };
                const int qs = jobs % Q_STAGES;
                if (jobs >= Q_STAGES) pa_mbar_wait(q_empty + qs, (jobs / Q_STAGES - 1) & 1);
                copy(q_s + qs * Q_ELEMS, BM, &p.map_q, (int)j.seq.q_start + j.blk.row0, j.blk.h, q_full + qs);
                for (int t = 0; t < j.n_tiles; ++t) {
                    const int i = tiles + t, st = i % STAGES, row = (int)j.seq.k_start + (j.first + t) * BN;
                    if (i >= STAGES) pa_mbar_wait(k_empty + st, (i / STAGES - 1) & 1);
                    copy(k_s + st * PARTS * KV, BN, &p.map_k, row, j.blk.h_kv, k_full + st);
#if PA_F32
                    const int land = i % V_LANDING;
                    if (i >= V_LANDING) pa_mbar_wait(land_empty + land, (i / V_LANDING - 1) & 1);
                    copy(v_land + land * KV, BN, &p.map_v, row, j.blk.h_kv, land_full + land);
#else
                    if (i >= STAGES) pa_mbar_wait(v_empty + st, (i / STAGES - 1) & 1);
                    copy(v_s + st * KV, BN, &p.map_v, row, j.blk.h_kv, v_full + st);
#endif
                }
                ++jobs;
                tiles += j.n_tiles;
            });
        }
        return;
    }

    if (REALLOCATE) pa_regs_inc<MMA_REGS>();
    // Issue this warpgroup's products in its turn (`mine`), then hand the turn to the other (`hand_on`). A job gives a
    // warpgroup a turn per key tile its rows see and one for the last P·V; warpgroup 1 sees at least the tiles that
    // warpgroup 0 sees, and takes its turns past warpgroup 0's without waiting (see `limit` below).
    auto take_turn = [&](bool mine) {
        if (PINGPONG && mine) pa_named_sync(turn_barrier(wg), 2 * 128);
    };
    auto pass_turn = [&](bool hand_on) {
        if (PINGPONG && hand_on) pa_named_arrive(turn_barrier(1 - wg), 2 * 128);
    };
    auto arrive = [&](unsigned long long* bar) {  // once per warp, after the products reading the buffer completed
        if (pa_lane_id() == 0) pa_mbar_arrive(bar);
    };
    // O_BULK: the Q buffer whose output rows this thread's bulk stores may still read (-1: none); its warp's share of
    // the buffer's release waits for them.
    int stored_q = -1;
    auto release_stored_q = [&]() {
        if (O_BULK && stored_q >= 0) {
            pa_bulk_wait_read();
            pa_mbar_arrive(q_empty + stored_q);
            stored_q = -1;
        }
    };
    // Warpgroup 0 goes first; the turn then passes back and forth across the jobs, and warpgroup 1's last
    // hand-over is taken after the last job.
    if (PINGPONG && wg == 1) pa_named_arrive(turn_barrier(0), 2 * 128);
    // This warpgroup's counts of jobs and tiles in one register (three computing warpgroups have none to spare), each
    // modulo the period with which its buffer and phase repeat: (tiles % TILE_PERIOD) * JOB_PERIOD + jobs % JOB_PERIOD.
    constexpr int JOB_PERIOD = 2 * Q_STAGES, TILE_PERIOD = 2 * STAGES;
    int passed = 0;
    for_each_job(p, [&](const Job& j) {
        const int jobs = passed % JOB_PERIOD, tiles = passed / JOB_PERIOD;
        const PaMod mod = pa_seq_mod(p, j.seq, j.blk.b, j.blk.h);
        const int row0 = j.blk.row0, n_tiles = j.n_tiles;
        // The key tiles this warpgroup's rows see (under a causal mask the first warpgroups' last tiles may lie above
        // their rows' diagonal; those are only released). Turn k of warpgroup 1 (tile k, or the last P·V at k = n_own)
        // waits for warpgroup 0's turn k while k <= limit, the number of warpgroup 0's tiles, and hands on to its turn
        // k + 1 while k < limit; its last turn hands on to the next job's first unless warpgroup 0 had no turn
        // (limit -1). Warpgroup 0 takes and hands on every turn (limit: no bound).
        const int w = pa_wave_uniform(wg), n_own = rows_tiles(j.seq.mask, j, 64 * (w + 1));
        const int n_own0 = rows_tiles(j.seq.mask, j, 64), limit = w == 0 ? (1 << 30) : (n_own0 > 0 ? n_own0 : -1);
        pa_mma_c acc[1][ON], part[1][ON];
        // Where P·V goes: float32 sums each tile apart (pa_tile_pv_start), to be added to acc.
        pa_mma_c(&pv)[1][ON] = F32 ? part : acc;
        PaSoftmax<1> sm;
        pa_softmax_init(sm);
        pa_mma_c_zero(acc);
        pa_mma_a probs[1][BN / PA_MMA_K];  // P of the previous tile, the left operand of its P·V
        auto add_part = [&]() {
#pragma unroll
            for (int c = 0; c < ON; ++c)
#pragma unroll
                for (int r = 0; r < PA_MMA_C_REGS; ++r) acc[0][c][r] += part[0][c][r];
        };

        const int qs = jobs % Q_STAGES;
        pa_elem* q = q_s + qs * Q_ELEMS;
        pa_mbar_wait(q_full + qs, (jobs / Q_STAGES) & 1);
#if PA_F32
        // Split this warpgroup's Q rows (64 rows of each column block are contiguous).
        for (int c = 0; c < COL_BLOCKS; ++c)
            for (int i = threadIdx.x % 128 * PA_TILE_CHUNK; i < 64 * ROW_ELEMS; i += 128 * PA_TILE_CHUNK) {
                pa_elem* x = q + c * BM * ROW_ELEMS + wg * 64 * ROW_ELEMS + i;
                pa_tile_split4(x, x + pa_tile_elems<BM>());
            }
        pa_wgmma_smem_fence();
        pa_named_sync(group_barrier(wg), 128);
#endif
        if (n_own == 0 && !O_BULK) arrive(q_empty + qs);
        for (int tile = 0; tile < n_own; ++tile) {
            const int i = tiles + tile, st = i % STAGES, prev = (i - 1) % STAGES;
            pa_mbar_wait(k_ready + st, (i / STAGES) & 1);
            if (tile > 0) pa_mbar_wait(v_ready + prev, ((i - 1) / STAGES) & 1);
            pa_mma_c s[1][SN];
            take_turn(tile <= limit);
            pa_tile_qk_start<1, SN, BM, BN>(s, q, k_s + st * PARTS * KV);
            if (tile > 0) {
                pa_tile_pv_start<1, ON, BN>(pv, probs, v_s + prev * PARTS * KV);
                pa_tile_wait_scores<1>(s);  // P·V goes on
            } else {
                pa_tile_wait_scores<0>(s);
            }
            pass_turn(tile < limit);
            arrive(k_empty + st);  // Q·K^T of this tile is done: its K buffer refills while P·V and the softmax run
            if (O_BULK && tile == 0) release_stored_q();             // the previous job's output has been read by now
            if (!O_BULK && tile == n_own - 1) arrive(q_empty + qs);  // after its last one, the job's Q buffer
            const bool any_rescale =
                pa_softmax_tile(s, sm, job_mask(p, j), mod, p.scale_log2, row0, BM, (j.first + tile) * BN);
            pa_tile_wait_all(pv);
            if (tile > 0) {
                arrive(v_empty + prev);
                if (F32) add_part();
            }
            if (any_rescale) pa_softmax_rescale(acc, sm);
            pa_tile_to_a(probs, s);
        }
        if (n_own > 0) {
            const int last = (tiles + n_own - 1) % STAGES;
            pa_mbar_wait(v_ready + last, ((tiles + n_own - 1) / STAGES) & 1);
            const int keys = n_own == n_tiles ? last_tile_keys(p, j) : BN;
            if (!F32 && keys < BN) {  // the next sequence's V rows, zeroed by each warpgroup (float32: when split)
                pa_tile_zero_rows<BN>(v_s + last * KV, keys, threadIdx.x % 128, 128);
                pa_wgmma_smem_fence();
                pa_named_sync(group_barrier(wg), 128);
            }
            take_turn(n_own <= limit);
            pa_tile_pv_start<1, ON, BN>(pv, probs, v_s + last * PARTS * KV);
            pass_turn(limit >= 0);
            pa_tile_wait_all(pv);
            arrive(v_empty + last);
            if (F32) add_part();
        }
        for (int tile = n_own; tile < n_tiles; ++tile) {  // tiles above this warpgroup's rows: released once landed
            const int i = tiles + tile, st = i % STAGES;
            pa_mbar_wait(k_ready + st, (i / STAGES) & 1);
            arrive(k_empty + st);
            pa_mbar_wait(v_ready + st, (i / STAGES) & 1);
            arrive(v_empty + st);
        }
        float* lse = p.lse == nullptr ? nullptr : p.lse + j.blk.b * p.lse_sb + j.blk.h * p.lse_sh + j.seq.q_start;
#if PA_STORE_O_BULK
        {
            release_stored_q();  // a job without key tiles follows a job whose stores are still pending
            float inv[PA_MMA_C_ROWS];
            pa_softmax_finish(acc, sm, row0, [&](int row, int, int r, float scale, float row_lse) {
                inv[r] = scale;
                if (lse != nullptr && row < j.seq.seqlen_q && pa_mma_c_col(0) == 0) lse[row] = row_lse;
            });
            pa_tile_store_rows_smem<BM>(q, acc[0], pa_wave_row<1>(0), inv);
            pa_wgmma_smem_fence();
            pa_named_sync(group_barrier(wg), 128);
            const int first = row0 + wg * 64;  // this warpgroup's first row
            if (!bulk_store_fits(p, j, first)) {
                // A packed sequence's last rows: the threads store those within it, 16 bytes at a time.
                pa_elem* o = static_cast<pa_elem*>(p.o) + j.blk.b * p.o_sb + j.blk.h * p.o_sh + j.seq.q_start * p.o_sn;
                constexpr int CHUNKS = D / PA_TILE_CHUNK;  // 16-byte chunks of a row
                for (int i = threadIdx.x % 128; i < 64 * CHUNKS; i += 128) {
                    const int row = first + i / CHUNKS, c = i % CHUNKS * PA_TILE_CHUNK;
                    if (row < j.seq.seqlen_q)
                        *reinterpret_cast<float4*>(o + row * p.o_sn + c) =
                            *reinterpret_cast<const float4*>(q + pa_tile_offset<BM>(wg * 64 + i / CHUNKS, c));
                }
                arrive(q_empty + qs);
            } else if (threadIdx.x % 128 == 0) {
#pragma unroll
                for (int c = 0; c < COL_BLOCKS; ++c)
                    pa_tma_store4(&p.map_o, c * ROW_ELEMS, (int)j.seq.q_start + first, j.blk.h, map_batch(p, j),
                                  q + c * BM * ROW_ELEMS + wg * 64 * ROW_ELEMS);
                pa_bulk_commit();
                stored_q = qs;
            } else {
                arrive(q_empty + qs);
            }
        }
#else
        pa_softmax_store(acc, sm,
                         static_cast<pa_elem*>(p.o) + j.blk.b * p.o_sb + j.blk.h * p.o_sh + j.seq.q_start * p.o_sn,
                         p.o_sn, row0, j.seq.seqlen_q, lse);
#endif
        passed = (tiles + n_tiles) % TILE_PERIOD * JOB_PERIOD + (jobs + 1) % JOB_PERIOD;
    });
    release_stored_q();  // the last stores read the buffer before the block ends
    if (PINGPONG && wg == 0) pa_named_sync(turn_barrier(0), 2 * 128);
}
