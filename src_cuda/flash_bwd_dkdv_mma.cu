// FlashAttention backward on the matrix units, per block of keys: dK and dV (and, with p.dq_atomic, the sums of dQ)
// for PA_BLOCK_N keys of one (batch, key/value head), over every query head of its group and every query tile.
//
// The waves split the block's keys into PA_MMA_M-row tiles (MT per wave) and hold their rows of dK and dV in
// registers for the whole block: grouped-query heads add into the same registers, nothing is repeated in memory.
// Per query tile of PA_BLOCK_M rows, with K and V in shared memory for the whole block and Q, dO, LSE and delta
// streamed through PA_STAGES buffers (2: the next tile's copies run while the current one is computed):
//   S^T = K Q^T, dP^T = V dO^T                   (pa_tile_qk: rows are keys)
//   P^T = exp2(S^T scale log2(e) - LSE), dS^T = scale P^T (dP^T - delta)            (pa_bwd.cuh)
//   dV += P^T dO, dK += dS^T Q                     (pa_tile_pv: the probabilities stay in registers)
//   dQ += dS K                                     (dS^T through shared memory; float32 atomic adds into dq_accum)
// PA_SPLIT > 1 gives each block 1 / PA_SPLIT of the head dim's columns of dK, dV and dQ (S and dP are computed
// whole by each): the accumulators of large head dims then fit the registers.
// With the warpgroup MMA (PA_MMA_WGMMA, sm_90a) each warpgroup owns 64 keys; the products read Q, dO, K, V and the
// dS tile from shared memory in the unit's swizzled layout and run asynchronously, and dQ = dS K is split between
// the warpgroups by 64-row blocks of the query tile and, within those, by head-dim columns (32-query tiles, which
// leave room for the whole K and V at d = 256: dQ^T = K^T dS^T, by head-dim columns). The products run in the order
// dV, dQ, dK, so that dK keeps the unit busy while dQ is stored. dQ's float32 result goes
// to a tile in shared memory, which one more warpgroup (WRITERS threads past PA_THREADS) adds to dq_accum while the
// others go on with the next query tile; two transaction barriers hand the tile back and forth. That warpgroup's
// first warp copies the query tiles of Q and dO with bulk tensor copies (pa_prelude_tma.cuh), PA_STAGES ahead,
// each buffer completing on its transaction barrier and refilled once every computing warp has released it; the
// other three add dQ. The warpgroup gives its registers to the computing warpgroups (setmaxnreg).
//
// float32 on NVIDIA's mma.sync with PA_KV_SPLIT: K and V are split once per block into their TF32 parts (in place)
// and rests (two more tiles), which Sᵀ, dPᵀ and dQ load as they are instead of splitting them for every query tile.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS (the computing threads),
// PA_BLOCK_THREADS (all of the block's), PA_SPLIT, PA_STAGES, PA_MIN_BLOCKS, PA_SMEM_BYTES, PA_BF16, PA_F32,
// PA_MMA_WGMMA, PA_KV_SPLIT, PA_DQ_SINGLE.
#include "pa_bwd.cuh"
#if PA_MMA_WGMMA
#include "pa_prelude_tma.cuh"
#endif

#if !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_SPLIT) || !defined(PA_STAGES) || \
    !defined(PA_MIN_BLOCKS) || !defined(PA_SMEM_BYTES) || !defined(PA_BLOCK_THREADS)
#error "PA_BLOCK_M, PA_BLOCK_N, PA_SPLIT, PA_STAGES, PA_MIN_BLOCKS, PA_SMEM_BYTES and PA_BLOCK_THREADS must be defined"
#endif
#ifndef PA_KV_SPLIT
#define PA_KV_SPLIT 0
#endif
#if PA_KV_SPLIT && (!PA_MMA_TF32 || PA_MMA_WGMMA)
#error "PA_KV_SPLIT is for float32 on NVIDIA's mma.sync"
#endif
#ifndef PA_DQ_SINGLE
#define PA_DQ_SINGLE 0
#endif
#if PA_DQ_SINGLE && PA_MMA_WGMMA
#error "PA_DQ_SINGLE is for mma.sync and MFMA"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;  // query rows per tile
constexpr int BN = PA_BLOCK_N;  // keys per block
constexpr int WAVES = PA_THREADS / PA_WARP_SIZE;
constexpr int MT = BN / (WAVES * PA_MMA_M);                         // key row tiles per wave
constexpr int SM = BM / PA_MMA_N;                                   // score column tiles (queries)
constexpr int DC = D / PA_SPLIT;                                    // head-dim columns of this block's dK, dV and dQ
constexpr int OC = DC / PA_MMA_N;                                   // their column tiles
constexpr int QT = pa_tile_elems<BM>();                             // elements of one Q or dO buffer
constexpr int STAGES = PA_STAGES;                                   // buffers of the streamed query tiles
constexpr int KV_REST = PA_KV_SPLIT ? 2 * pa_tile_elems<BN>() : 0;  // from K's and V's TF32 parts to their rests
static_assert(STAGES == 1 || STAGES == 2, "PA_STAGES must be 1 or 2");

static_assert(PA_THREADS % PA_WARP_SIZE == 0 && MT >= 1 && BN == WAVES * PA_MMA_M * MT, "bad PA_BLOCK_N / PA_THREADS");
static_assert(SM % PA_MMA_B_TILES == 0 && BM % PA_MMA_K == 0 && BN % PA_MMA_K == 0, "unsupported PA_BLOCK_M");
static_assert(D % PA_SPLIT == 0 && DC % (PA_MMA_N * PA_MMA_B_TILES) == 0 && D % PA_MMA_K == 0, "bad PA_SPLIT");
#if PA_MMA_WGMMA
// Query tiles of whole 64-row blocks, each taken by whole warpgroups, without a column split; or 32-query tiles
// (DQ_T: dQ^T = K^T dS^T, each warpgroup 64 of the block's head-dim columns), with or without one.
constexpr bool DQ_T = BM < 64;
static_assert(WAVES % 4 == 0 && (DQ_T ? 2 * BM == 64 && DC == 64 * (WAVES / 4)
                                      : PA_SPLIT == 1 && BM % 64 == 0 && WAVES / 4 % (BM / 64) == 0),
              "warpgroup MMA: unsupported query tile, column split or warpgroup count");
constexpr int DS_ELEMS = BM * BN;  // the dS tile [query][key], swizzled like the other tiles
// Padded row of the float32 dQ tile: a row step of 8 banks, so that the 8-byte stores of four rows by a half-warp
// fill the 32 banks once.
constexpr int LDQ = DC + 8;
constexpr int WRITERS = 128;                        // the copying and dQ-adding warpgroup's threads
constexpr int DQ_WRITERS = WRITERS - PA_WARP_SIZE;  // its threads that add dQ (all but the copying warp)
static_assert(DQ_WRITERS % (DC / 4) == 0, "the dQ writers take whole rows of 16-byte column groups");
constexpr int BLOCK_THREADS = PA_THREADS + WRITERS;
// Registers per thread after the reallocation (setmaxnreg), out of what the block holds at launch.
constexpr int WRITER_REGS = 24;
constexpr int MMA_REGS = 240;
static_assert(PA_THREADS * MMA_REGS + WRITERS * WRITER_REGS <= pa_launch_regs(BLOCK_THREADS) * BLOCK_THREADS,
              "the warpgroups ask for more registers than the block holds: setmaxnreg would wait forever");
// The dQ tile, then its full and empty transaction barriers, then the full and empty barriers of each buffer of the
// query tiles, then the barrier on which a packed sequence's last query tile lands.
constexpr int DQ_BYTES = 4 * BM * LDQ + 16 + 16 * STAGES + 8;
constexpr int ALIGN_SLACK = 1024 - 16;
// Element offset of (query, key) in the dS tile.
PA_DEVICE int ds_offset(int query, int key) { return pa_tile_offset<BM>(query, key & ~7) + (key & 7); }
#else
constexpr int LDS = BN + PA_TILE_CHUNK;  // padded row of the dS tile (elements)
constexpr int DS_ELEMS = BM * LDS;
constexpr int DQ_BYTES = 0;
constexpr int ALIGN_SLACK = 0;
constexpr int BLOCK_THREADS = PA_THREADS;
PA_DEVICE int ds_offset(int query, int key) { return query * LDS + key; }
#endif
static_assert(PA_BLOCK_THREADS == BLOCK_THREADS,
              "the host's block size (PA_BLOCK_THREADS) does not match this kernel's");
// K and V (and their rests), the buffers of Q and dO, the dS tile, the buffers of LSE and delta (warpgroup MMA: the
// dQ tile and its barriers).
constexpr int SMEM = (int)sizeof(pa_elem) * (2 * pa_tile_elems<BN>() + KV_REST + 2 * STAGES * QT + DS_ELEMS) +
                     8 * STAGES * BM + DQ_BYTES + ALIGN_SLACK;
static_assert(PA_SMEM_BYTES == SMEM,
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

#if PA_MMA_WGMMA
// dS^T (this wave's 16 key rows, the tile's query columns, as A fragments) into the [query][key] tile ds_s: one
// transposing store per 16 x 16 block; matrix j of a fragment holds keys 8 (j % 2) .. and queries 8 (j / 2) ...
PA_DEVICE void store_ds_transposed(const pa_mma_a (&ds)[MT][BM / PA_MMA_K], pa_elem* ds_s) {
    const int lane = pa_lane_id();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < BM / PA_MMA_K; ++kk)
            pa_stmatrix_x4_trans(ds[mt][kk], ds_s + ds_offset(kk * PA_MMA_K + lane / 16 * 8 + lane % 8,
                                                              pa_wave_row<MT>(mt) + lane / 8 % 2 * 8));
}
#else
// dS^T (this wave's key rows, the tile's query columns) into the [query][key] tile ds_s.
PA_DEVICE void store_ds_transposed(const pa_mma_c (&ds)[MT][SM], pa_elem* ds_s) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r)
#pragma unroll
            for (int j = 0; j < SM; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e)
                    pa_store_elem(
                        ds_s + ds_offset(j * PA_MMA_N + pa_mma_c_col(e), pa_wave_row<MT>(mt) + pa_mma_c_row(r)),
                        ds[mt][j][r * PA_MMA_C_COLS + e]);
}
#endif

#if PA_MMA_WGMMA
// dS K of query tile t into the float32 tile dq_s, which the dQ writers then add to dq_accum (write_dq). The
// warpgroups split the tile into DQ_ROWS blocks of 64 rows and, within them, the head dim into DQ_SLICES column slices:
// warpgroup g computes rows 64 (g % DQ_ROWS) .. (each of its warps 16 of them) of slice g / DQ_ROWS. A slice is
// DQ_N columns, whole 64-column blocks of the K tile (the unit's N-major operands start at a block), the last one
// what is left of the head dim (d = 96: 64 and 32).
// Before writing, waits for the writers to be done with tile t - 1; then hands the tile to them (`full`).
constexpr int DQ_ROWS = DQ_T ? 1 : BM / 64;
constexpr int DQ_SLICES = WAVES / 4 / DQ_ROWS;
constexpr int DQ_N = (D / DQ_SLICES + 63) / 64 * 64;
constexpr int DQ_LAST = D - (DQ_SLICES - 1) * DQ_N;
static_assert(DQ_LAST > 0 && DQ_LAST <= DQ_N, "the head dim's dQ slices");
// One warpgroup's part of the tile's dQ product (ON fragments per row): zeroed, step(k0) issued for every 16 keys
// of the block; then then_start() starts the tile's last product (dK), which runs on while dQ completes and is
// stored; then waits until the writers are done with tile t - 1 (`empty`).
template <int ON, class Step, class Then>
PA_DEVICE void dq_product(pa_mma_c (&part)[ON], const Step& step, const Then& then_start, unsigned long long* empty,
                          int t) {
    pa_mma_c_zero(part);
    pa_wgmma_fence();
#pragma unroll
    for (int k0 = 0; k0 < BN; k0 += PA_MMA_K) step(&part[0][0], k0);
    pa_wgmma_commit();
    then_start();
    pa_wgmma_wait<1>();
    pa_wgmma_settle<ON * 4>(&part[0][0]);
    if (t > 0) pa_mbar_wait(empty, (t - 1) & 1);
}
template <int N, class Then>
PA_DEVICE void add_dq_slice(const pa_elem* ds_s, const pa_elem* k_s, float* dq_s, unsigned long long* full,
                            unsigned long long* empty, int t, int r0, int c0, const Then& then_start) {
    pa_mma_c part[N / PA_MMA_N];
    dq_product(
        part,
        [&](float* d, int k0) {
            pa_wgmma_st<N>(d, pa_tile_desc<BM>(ds_s, r0, k0, 16), pa_tile_desc<BN>(k_s, k0, c0, BN * 128));
        },
        then_start, empty, t);
#pragma unroll
    for (int rr = 0; rr < PA_MMA_C_ROWS; ++rr)
        pa_tile_store_row_f32(dq_s + (r0 + pa_wave_id() % 4 * PA_MMA_M + pa_mma_c_row(rr)) * LDQ + c0, part, rr, 1.f);
    pa_mbar_arrive(full);
}
// 32-query tiles: dQ^T = K^T dS^T, warpgroup g taking the block's head-dim columns c0 + 64 g .. as the product's
// rows (K read transposed), its float32 result stored transposed into the dQ tile.
template <class Then>
PA_DEVICE void add_dq_transposed(const pa_elem* ds_s, const pa_elem* k_s, float* dq_s, unsigned long long* full,
                                 unsigned long long* empty, int t, int c0, const Then& then_start) {
    const int m0 = pa_wave_id() / 4 * 64;
    pa_mma_c part[BM / PA_MMA_N];
    dq_product(
        part,
        [&](float* d, int k0) {
            pa_wgmma_ts_n32(d, pa_tile_desc<BN>(k_s, k0, c0 + m0, BN * 128), pa_tile_desc<BM>(ds_s, 0, k0, 16));
        },
        then_start, empty, t);
    const int col = m0 + pa_wave_id() % 4 * PA_MMA_M;  // this warp's first head-dim column of the dQ tile
#pragma unroll
    for (int j = 0; j < BM / PA_MMA_N; ++j)
#pragma unroll
        for (int rr = 0; rr < PA_MMA_C_ROWS; ++rr)
#pragma unroll
            for (int e = 0; e < PA_MMA_C_COLS; ++e)
                dq_s[(j * PA_MMA_N + pa_mma_c_col(e)) * LDQ + col + pa_mma_c_row(rr)] = part[j][rr * PA_MMA_C_COLS + e];
    pa_mbar_arrive(full);
}
template <class Then>
PA_DEVICE void add_dq(const pa_elem* ds_s, const pa_elem* k_s, float* dq_s, unsigned long long* full,
                      unsigned long long* empty, int t, int c0, const Then& then_start) {
    if constexpr (DQ_T) {
        add_dq_transposed(ds_s, k_s, dq_s, full, empty, t, c0, then_start);
    } else {
        const int g = pa_wave_id() / 4, r0 = g % DQ_ROWS * 64, slice = g / DQ_ROWS;
        if (DQ_LAST == DQ_N || slice < DQ_SLICES - 1)
            add_dq_slice<DQ_N>(ds_s, k_s, dq_s, full, empty, t, r0, slice * DQ_N, then_start);
        else
            add_dq_slice<DQ_LAST>(ds_s, k_s, dq_s, full, empty, t, r0, slice * DQ_N, then_start);
    }
}

// The dQ writers: for each of the block's `tiles` query tiles, wait for its dQ tile dq_s, add its first `valid` rows
// to the float32 rows at dst (tile_rows(t, dst, valid)) with 16-byte atomics, and hand the tile back. Writer i adds
// columns 4 (i % (DC / 4)) .. of rows i / (DC / 4), i / (DC / 4) + DQ_WRITERS / (DC / 4), ...
template <class TileRows>
PA_DEVICE void write_dq(const float* dq_s, unsigned long long* full, unsigned long long* empty, int tiles,
                        const TileRows& tile_rows) {
    const int id = threadIdx.x - PA_THREADS - PA_WARP_SIZE, c = id % (DC / 4) * 4;
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
        float* dst;
        int valid;
        tile_rows(t, dst, valid);
        dst += c;
        pa_mbar_wait(full, t & 1);
#pragma unroll 1
        for (int r = id / (DC / 4); r < min(BM, valid); r += DQ_WRITERS / (DC / 4))
            pa_atomic_add4(dst + r * D, pa_load4(dq_s + r * LDQ + c));
        pa_mbar_arrive(empty);
    }
}

// The copying warp: for each of the block's `tiles` query tiles, wait until every computing warp has released the
// tile's buffer (tile t - STAGES was in it), then copy the tile's Q and dO rows into it with bulk tensor copies (its
// first lane) completing on its `full` barrier. tile_at(t, row, head, valid) gives the tile's first row, its head and
// its rows within the sequence; `batch` is the maps' batch index. A packed sequence's last tile (valid < BM) lands on
// `landed` instead: the warp zeroes its rows past the end (the next sequence's, which through P = 0 and dS = 0 would
// still turn a non-finite value into NaN), then completes `full` itself.
template <class TileAt>
PA_DEVICE void copy_query_tiles(const PaBwdParams& p, pa_elem* q_s, pa_elem* do_s, unsigned long long* full,
                                unsigned long long* empty, unsigned long long* landed, int tiles, int batch,
                                const TileAt& tile_at) {
    constexpr int W = PA_TILE_ROW_ELEMS;  // columns of one copy (128 bytes; past the head dim the copies bring zeros)
    const int lane = pa_lane_id();
    int partial = 0;  // tiles that landed on `landed` so far: its phase
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
        const int buf = t % STAGES;
        int row, head, valid;
        tile_at(t, row, head, valid);
        unsigned long long* bar = valid < BM ? landed : full + buf;
        if (t >= STAGES) pa_mbar_wait(empty + buf, (t / STAGES - 1) & 1);
        if (lane == 0) {
            pa_mbar_expect_bytes(bar, 2 * QT * (int)sizeof(pa_elem));
#pragma unroll
            for (int c = 0; c < (D + W - 1) / W; ++c) {
                pa_tma_load4(q_s + buf * QT + c * BM * W, &p.map_q, c * W, row, head, batch, bar);
                pa_tma_load4(do_s + buf * QT + c * BM * W, &p.map_do, c * W, row, head, batch, bar);
            }
        }
        if (valid < BM) {
            pa_mbar_wait(landed, partial++ & 1);
            pa_tile_zero_rows<BM>(q_s + buf * QT, valid, lane, PA_WARP_SIZE);
            pa_tile_zero_rows<BM>(do_s + buf * QT, valid, lane, PA_WARP_SIZE);
            pa_wgmma_smem_fence();
            pa_warp_sync();
            if (lane == 0) pa_mbar_arrive(full + buf);
        }
    }
}

// Every computing thread (not the dQ writers) waits here.
PA_DEVICE void sync_computing() { pa_named_sync(1, PA_THREADS); }
#else
PA_DEVICE void sync_computing() { __syncthreads(); }

// dq_accum rows m0.. (columns c0..) += dS K: the BM x DC product split into units of PA_MMA_M rows and
// PA_MMA_B_TILES column tiles, spread over the waves, each added with float32 atomics. Where every wave has an even
// number of units, it takes them two at a time, side by side (they share their dS fragments) or else one above the
// other (they share their K fragments): half of one operand's loads, and two independent chains of products.
// PA_DQ_SINGLE keeps them one at a time (fewer registers).
constexpr int DQ_ROW_TILES = BM / PA_MMA_M;
constexpr int DQ_COL_UNITS = OC / PA_MMA_B_TILES;
constexpr bool DQ_PAIRS = !PA_DQ_SINGLE && DQ_ROW_TILES * DQ_COL_UNITS % (2 * WAVES) == 0;
constexpr int DQ_UC = DQ_PAIRS && DQ_COL_UNITS % 2 == 0 ? 2 : 1;  // column units of a wave's group
constexpr int DQ_UR = DQ_PAIRS && DQ_UC == 1 ? 2 : 1;             // row tiles of a wave's group
PA_DEVICE void add_dq(const pa_elem* ds_s, const pa_elem* k_s, float* dq, int m0, int rows, int c0) {
    constexpr int GROUP_COLS = DQ_COL_UNITS / DQ_UC, GROUPS = DQ_ROW_TILES / DQ_UR * GROUP_COLS;
    for (int g = pa_wave_id(); g < GROUPS; g += WAVES) {
        const int rt0 = g / GROUP_COLS * DQ_UR, ct0 = g % GROUP_COLS * DQ_UC;
        pa_mma_c part[DQ_UR * DQ_UC][PA_MMA_B_TILES];
        pa_mma_c_zero(part);
#pragma unroll
        for (int k0 = 0; k0 < BN; k0 += PA_MMA_K) {
            pa_mma_a a[DQ_UR];
#pragma unroll
            for (int i = 0; i < DQ_UR; ++i) pa_mma_load_a_kn(a[i], ds_s + ds_offset((rt0 + i) * PA_MMA_M, k0), LDS);
            pa_mma_b b[DQ_UC];
#pragma unroll
            for (int j = 0; j < DQ_UC; ++j)
                pa_tile_load_b_kn<BN, KV_REST>(b[j], k_s, k0, c0 + (ct0 + j) * PA_MMA_B_TILES * PA_MMA_N);
#pragma unroll
            for (int i = 0; i < DQ_UR; ++i)
#pragma unroll
                for (int j = 0; j < DQ_UC; ++j)
#pragma unroll
                    for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(part[i * DQ_UC + j][t], a[i], b[j], t);
        }
#pragma unroll
        for (int u = 0; u < DQ_UR * DQ_UC; ++u)
#pragma unroll
            for (int t = 0; t < PA_MMA_B_TILES; ++t)
#pragma unroll
                for (int rr = 0; rr < PA_MMA_C_ROWS; ++rr) {
                    const int row = m0 + (rt0 + u / DQ_UC) * PA_MMA_M + pa_mma_c_row(rr);
                    if (row >= rows) continue;
                    float* dst = dq + (pa_i64)row * D + c0 + ((ct0 + u % DQ_UC) * PA_MMA_B_TILES + t) * PA_MMA_N;
                    if constexpr (PA_MMA_C_COLS == 2) {  // two adjacent columns: one paired reduction
                        pa_atomic_add2(dst + pa_mma_c_col(0), part[u][t][rr * 2], part[u][t][rr * 2 + 1]);
                    } else {
#pragma unroll
                        for (int cc = 0; cc < PA_MMA_C_COLS; ++cc)
                            atomicAdd(dst + pa_mma_c_col(cc), part[u][t][rr * PA_MMA_C_COLS + cc]);
                    }
                }
    }
}
#endif

}  // namespace

extern "C" __global__ void __launch_bounds__(BLOCK_THREADS, PA_MIN_BLOCKS)
    pa_flash_bwd_dkdv_mma(const PA_GRID_CONSTANT PaBwdParams p) {
    extern __shared__ float4 pa_smem4[];
    pa_elem* k_s = pa_tile_base(pa_smem4);
    pa_elem* v_s = k_s + pa_tile_elems<BN>();
    pa_elem* q_s = v_s + pa_tile_elems<BN>() + KV_REST;  // STAGES buffers each of Q and dO
    pa_elem* do_s = q_s + STAGES * QT;
    pa_elem* ds_s = do_s + STAGES * QT;
    float* lse_s = reinterpret_cast<float*>(ds_s + DS_ELEMS);  // STAGES buffers each of LSE (log2 units) and delta
    float* delta_s = lse_s + STAGES * BM;
#if PA_MMA_WGMMA
    float* dq_s = delta_s + STAGES * BM;  // BM x LDQ
    // The dQ tile's barriers: written (every computing thread arrives), added (every writer arrives).
    unsigned long long* dq_full = reinterpret_cast<unsigned long long*>(dq_s + BM * LDQ);
    unsigned long long* dq_empty = dq_full + 1;
    // Each buffer's query tiles: landed (the copies' bytes), released (every computing warp arrives).
    unsigned long long* q_full = dq_empty + 1;
    unsigned long long* q_empty = q_full + STAGES;
    unsigned long long* q_landed = q_empty + STAGES;  // a packed sequence's last query tile has landed
    if (threadIdx.x == 0) {
        pa_mbar_init(dq_full, PA_THREADS);
        pa_mbar_init(dq_empty, DQ_WRITERS);
        for (int i = 0; i < STAGES; ++i) {
            pa_mbar_init(q_full + i, 1);
            pa_mbar_init(q_empty + i, WAVES);
        }
        pa_mbar_init(q_landed, 1);
        pa_mbar_init_fence();
    }
    __syncthreads();
#endif

    // Block x: key block n of (batch, key/value head) bh, column slice c; consecutive blocks take the key blocks of
    // one head, which share its Q and dO in the L2 cache.
    const int per_head = p.num_n_blocks * PA_SPLIT;
    const int n_block = blockIdx.x % per_head / PA_SPLIT, c0 = blockIdx.x % PA_SPLIT * DC;
    const int b = blockIdx.x / per_head / p.heads_kv, h_kv = blockIdx.x / per_head % p.heads_kv;
    const int n0 = n_block * BN;
    const int group = p.heads_q / p.heads_kv;
    const PaSeq seq = pa_seq(p, b);
    if (n0 >= seq.seqlen_k) return;  // past the end of a shorter sequence
    const PaMask& mask = seq.mask;

    // The query tiles of every head of the group, in order: tile t holds query rows m_first + (t % per_group) BM.. of
    // head h_kv group + t / per_group. The computing threads step from one tile's head and rows to the next
    // (next_tile), without divisions; the copying warp and the dQ writers (warpgroup MMA) work them out from t
    // (tile_head, tile_row). start_tile(t, h, m0) starts copying tile t (head h, rows m0..) into buffer t % STAGES.
    const int m_first = pa_mask_first_row(mask, n0) / BM * BM;
    const int m_end = min(seq.seqlen_q, pa_mask_rows_end(mask, n0, BN));
    const int per_group = m_first < m_end ? (m_end - m_first + BM - 1) / BM : 0;
    const int tiles = per_group * group;
    auto next_tile = [&](int& h, int& m0) {
        m0 += BM;
        if (m0 >= m_first + per_group * BM) {
            m0 = m_first;
            ++h;
        }
    };
#if PA_MMA_WGMMA
    if (threadIdx.x >= PA_THREADS) {  // the copying warp and the dQ writers
        auto tile_head = [&](int t) { return h_kv * group + t / per_group; };
        auto tile_row = [&](int t) { return m_first + t % per_group * BM; };
        pa_regs_dec<WRITER_REGS>();
        if (threadIdx.x < PA_THREADS + PA_WARP_SIZE)
            copy_query_tiles(p, q_s, do_s, q_full, q_empty, q_landed, tiles, p.cu_seqlens_q != nullptr ? 0 : b,
                             [&](int t, int& row, int& head, int& valid) {
                                 head = tile_head(t);
                                 row = (int)seq.q_start + tile_row(t);
                                 // the maps give zeros past the end of a tensor, not of a packed sequence
                                 valid = p.cu_seqlens_q != nullptr ? min(BM, seq.seqlen_q - tile_row(t)) : BM;
                             });
        else if (p.dq_atomic)
            write_dq(dq_s, dq_full, dq_empty, tiles, [&](int t, float*& dst, int& valid) {
                const int h = tile_head(t), m0 = tile_row(t);
                dst = p.dq_accum + (pa_bwd_row0(p, seq, b, h) + m0) * D + c0;
                valid = seq.seqlen_q - m0;
            });
        return;
    }
    pa_regs_inc<MMA_REGS>();
#endif

    const PaTileLoader<BN> kv_loader;
    kv_loader.start(k_s, static_cast<const pa_elem*>(p.k) + b * p.k_sb + h_kv * p.k_sh + (seq.k_start + n0) * p.k_sn,
                    p.k_sn, seq.seqlen_k - n0);
    kv_loader.start(v_s, static_cast<const pa_elem*>(p.v) + b * p.v_sb + h_kv * p.v_sh + (seq.k_start + n0) * p.v_sn,
                    p.v_sn, seq.seqlen_k - n0);
    // Starts copying query tile t into buffer t % STAGES: its LSE and delta rows, and (without the copying warp) its
    // Q and dO rows.
    auto start_tile = [&](int t, int h, int m0) {
        const int buf = t % STAGES;
#if !PA_MMA_WGMMA
        const PaTileLoader<BM> q_loader;
        q_loader.start(q_s + buf * QT,
                       static_cast<const pa_elem*>(p.q) + b * p.q_sb + h * p.q_sh + (seq.q_start + m0) * p.q_sn, p.q_sn,
                       seq.seqlen_q - m0);
        q_loader.start(do_s + buf * QT,
                       static_cast<const pa_elem*>(p.dout) + b * p.do_sb + h * p.do_sh + (seq.q_start + m0) * p.do_sn,
                       p.do_sn, seq.seqlen_q - m0);
#endif
        const pa_i64 row = pa_bwd_row0(p, seq, b, h) + m0;
        for (int i = threadIdx.x; i < BM; i += PA_THREADS) {
#if PA_MMA_WGMMA
            // Rows past the end add nothing: the bulk copies bring zeros there (the copying warp zeroes a packed
            // sequence's next rows), and an infinite LSE gives them P = 0 (and dS = 0).
            if (m0 + i >= seq.seqlen_q) {
                lse_s[buf * BM + i] = __int_as_float(0x7f800000);
                delta_s[buf * BM + i] = 0.f;
                continue;
            }
#endif
            const bool ok = m0 + i < seq.seqlen_q;  // rows past the end get 0: their Q and dO rows are zeros
            pa_async_copy4(lse_s + buf * BM + i, ok ? p.lse_log2 + row + i : p.lse_log2, ok);
            pa_async_copy4(delta_s + buf * BM + i, ok ? p.delta + row + i : p.delta, ok);
        }
    };
    if (tiles > 0) start_tile(0, h_kv * group, m_first);
    pa_async_commit();

#if PA_KV_SPLIT
    pa_async_wait<0>();
    sync_computing();  // K and V have landed
    constexpr int ROW_CHUNKS = D / 4;
#pragma unroll 1
    for (int i = threadIdx.x; i < 2 * BN * ROW_CHUNKS; i += PA_THREADS) {
        float* x = (i < BN * ROW_CHUNKS ? k_s : v_s) + pa_tile_offset<BN>(i / ROW_CHUNKS % BN, i % ROW_CHUNKS * 4);
        pa_tile_split4(x, x + KV_REST);
    }  // the loop's first barrier orders the split before the products
#endif

    pa_mma_c dk[MT][OC], dv[MT][OC];
    pa_mma_c_zero(dk);
    pa_mma_c_zero(dv);

    for (int t = 0, h = h_kv * group, m0 = m_first; t < tiles; ++t) {
        const int buf = t % STAGES;
        int h_next = h, m0_next = m0;
        next_tile(h_next, m0_next);
        pa_async_wait<0>();
        sync_computing();  // tile t has landed; every wave is done with tile t - 1 (its buffers and the dS tile)
        if (STAGES == 2 && t + 1 < tiles) {
            start_tile(t + 1, h_next, m0_next);
            pa_async_commit();
        }
#if PA_MMA_WGMMA
        pa_mbar_wait(q_full + buf, (t / STAGES) & 1);
#endif
        const pa_elem* q_t = q_s + buf * QT;
        const pa_elem* do_t = do_s + buf * QT;

        pa_mma_c s[MT][SM], ds[MT][SM];
#if PA_TILE_ASYNC
        pa_tile_qk_start<MT, SM, BN, BM>(s, k_s, q_t);
        pa_tile_qk_start<MT, SM, BN, BM>(ds, v_s, do_t);
        pa_tile_wait_scores<1>(s);
        pa_tile_wait_scores<0>(ds);
#else
        pa_tile_qk<MT, SM, BN, BM, KV_REST>(s, k_s, q_t);
        pa_tile_qk<MT, SM, BN, BM, KV_REST>(ds, v_s, do_t);
#endif
        pa_bwd_grads<true>(s, ds, lse_s + buf * BM, delta_s + buf * BM, mask, pa_seq_mod(p, seq, b, h), p.scale_log2,
                           p.scale, n0, m0, m0, pa_mask_tile_partial(mask, m0, BM, n0, BN));
#if PA_MMA_WGMMA
        // dS^T into its shared tile, dV; once both warpgroups' dS is written, dQ, then dK, which runs on while dQ is
        // stored.
        pa_mma_a p_a[MT][BM / PA_MMA_K], ds_a[MT][BM / PA_MMA_K];  // unchanged until the products complete
        pa_tile_to_a(p_a, s);
        pa_tile_to_a(ds_a, ds);
        if (p.dq_atomic) store_ds_transposed(ds_a, ds_s);
        pa_tile_pv_start<MT, OC, BM>(dv, p_a, pa_tile_operand<BM>(do_t, 0, c0));
        const auto start_dk = [&] { pa_tile_pv_start<MT, OC, BM>(dk, ds_a, pa_tile_operand<BM>(q_t, 0, c0)); };
        if (p.dq_atomic) {
            pa_wgmma_smem_fence();
            sync_computing();
            add_dq(ds_s, k_s, dq_s, dq_full, dq_empty, t, c0, start_dk);
        } else {
            start_dk();
        }
        pa_tile_wait_all(dk);
        pa_tile_wait_all(dv);
#else
        pa_tile_pv<MT, OC, BM, SM>(dv, s, do_t + c0);
        pa_tile_pv<MT, OC, BM, SM>(dk, ds, q_t + c0);
        if (p.dq_atomic) {
            store_ds_transposed(ds, ds_s);
            sync_computing();
            add_dq(ds_s, k_s, p.dq_accum + pa_bwd_row0(p, seq, b, h) * D, m0, seq.seqlen_q, c0);
        }
#endif
#if PA_MMA_WGMMA
        if (pa_lane_id() == 0) pa_mbar_arrive(q_empty + buf);  // this warp is done with the buffer's Q and dO
#endif
        if (STAGES == 1 && t + 1 < tiles) {
            sync_computing();  // every wave is done with the one buffer
            start_tile(t + 1, h_next, m0_next);
            pa_async_commit();
        }
        h = h_next;
        m0 = m0_next;
    }
    pa_async_wait<0>();  // K and V of a block that no query sees

    pa_elem* dk_out = static_cast<pa_elem*>(p.dk) + b * p.dk_sb + h_kv * p.dk_sh + seq.k_start * p.dk_sn + c0;
    pa_elem* dv_out = static_cast<pa_elem*>(p.dv) + b * p.dv_sb + h_kv * p.dv_sh + seq.k_start * p.dv_sn + c0;
    pa_bwd_store_rows(dk, dk_out + (pa_i64)n0 * p.dk_sn, p.dk_sn, 0, seq.seqlen_k - n0, 1.f);
    pa_bwd_store_rows(dv, dv_out + (pa_i64)n0 * p.dv_sn, p.dv_sn, 0, seq.seqlen_k - n0, 1.f);
}
