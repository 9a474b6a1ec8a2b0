// portattn tile level of the matrix-unit kernels: shared tiles, their loads, and the tile products.
//
// A shared tile holds ROWS rows of PA_HEAD_DIM elements; pa_tile_offset<ROWS>(r, c) is the element offset of (r, c)
// for c a multiple of PA_TILE_CHUNK, and each chunk of PA_TILE_CHUNK elements (16 bytes) is contiguous. With the
// warpgroup MMA tiles use its 128-byte swizzled layout (above: rows of PA_TILE_ROW_ELEMS elements) and start
// 1024-byte aligned; mma.sync tiles built with PA_TILE_SWIZZLED (decode) take the same layout; otherwise rows are
// padded by 16 bytes, which keeps the fragment loads free of bank conflicts.
// float32 on the warpgroup MMA (TF32) reads split tiles: a tile of the operand's TF32 parts (big) followed by one
// of what they leave (small), and V transposed (rows of PA_HEAD_DIM, keys along the row in the P·V key order of
// pa_mma_tf32.cuh).
//
// A block's waves split its PA_BLOCK_M query rows into PA_MMA_M-row tiles, MT per wave; pa_wave_row<MT>(mt) is the
// first block row of this wave's tile mt (warpgroup MMA: the four warps of a group share each 64-row tile). With
// PA_KEY_WAVES > 1 (decode) that many consecutive waves share the same rows, each taking a slice of every key tile.
//   pa_tile_qk<MT, SN, BM, BN[, Q_REST]>(s, q_s, k_s[, row0])
//       s = Q K^T: this wave's rows of the BM-row tile q_s against SN * PA_MMA_N keys of the BN-row tile k_s, from
//       its row row0 (SN score fragments per row tile); Q_REST > 0: q_s is split (pa_tile_split4), its rests Q_REST
//       elements further
//   pa_tile_pv<MT, ON, BN, SN[, ROWS]>(acc, p, v_s[, row0])
//       acc += P V: the probabilities p (score fragments of BN keys) against BN rows of the ROWS-row tile v_s, from
//       its row row0 (ON = PA_HEAD_DIM / PA_MMA_N output fragments)
// These complete before they return (PA_TILE_ASYNC = 0). With the warpgroup MMA (PA_TILE_ASYNC = 1) the products
// are asynchronous instead: pa_tile_qk_start, pa_tile_pv_start (P as A fragments, from pa_tile_to_a) and the
// waits pa_tile_wait_scores<PENDING> / pa_tile_wait_all. PA_TILE_STAGES is the number of K and V buffers, and
// pa_tile_base gives the first tile in dynamic shared memory; pa_tile_store_row writes one output row
// (pa_tile_store_rows_smem, warpgroup MMA: a warp's rows into a shared tile).
// PaTileLoader<ROWS, STREAMED> copies ROWS x PA_HEAD_DIM tiles from global memory into that layout.
// PA_QK_UNROLL_ALL = 1 (from the host's tile) unrolls pa_tile_qk's loop over the whole head dim.
#pragma once

#include "pa_mma.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_THREADS)
#error "PA_HEAD_DIM and PA_THREADS must be defined by the host"
#endif
#ifndef PA_QK_UNROLL_ALL
#define PA_QK_UNROLL_ALL 0
#endif
#ifndef PA_KEY_WAVES
#define PA_KEY_WAVES 1  // waves that share the same query rows and split each key tile between them (decode)
#endif
// Which of the PA_KEY_WAVES waves sharing its query rows this wave is.
PA_DEVICE int pa_key_wave() { return pa_wave_id() % PA_KEY_WAVES; }
constexpr int PA_TILE_CHUNK = 16 / (int)sizeof(pa_elem);

// The probabilities (score fragments) as A fragments of P V.
template <int MT, int SN, int KT>
PA_DEVICE void pa_tile_to_a(pa_mma_a (&a)[MT][KT], const pa_mma_c (&p)[MT][SN]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) pa_mma_a_from_c(a[mt][kk], p[mt], kk * PA_MMA_K);
}

#if PA_MMA_TF32
// Split the four floats at x (16 bytes of shared memory) into their TF32 part, in place, and the rest, at small.
PA_DEVICE void pa_tile_split4(float* x, float* small) {
    const float4 v = pa_load4(x);
    pa_mma_a parts;  // big and small, four each
    pa_mma_split4(parts, {__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w)});
    const unsigned (&b)[4] = parts.big;
    const unsigned (&r)[4] = parts.small;
    pa_store4(x,
              make_float4(__uint_as_float(b[0]), __uint_as_float(b[1]), __uint_as_float(b[2]), __uint_as_float(b[3])));
    pa_store4(small,
              make_float4(__uint_as_float(r[0]), __uint_as_float(r[1]), __uint_as_float(r[2]), __uint_as_float(r[3])));
}
#endif  // PA_MMA_TF32

#if PA_MMA_WGMMA || PA_TILE_SWIZZLED
// The swizzled layout (warpgroup MMA tiles, and mma.sync tiles built with PA_TILE_SWIZZLED): rows are stored as blocks
// of PA_TILE_ROW_ELEMS columns (128 bytes), their 16-byte chunks permuted by row; a head dim that is not a multiple of
// it (96) leaves the last block's columns past it unused.
constexpr int PA_TILE_ROW_ELEMS = 128 / (int)sizeof(pa_elem);
template <int ROWS>
__host__ __device__ constexpr int pa_tile_elems() {
    return ROWS * ((PA_HEAD_DIM + PA_TILE_ROW_ELEMS - 1) / PA_TILE_ROW_ELEMS * PA_TILE_ROW_ELEMS);
}
template <int ROWS>
PA_DEVICE int pa_tile_offset(int r, int c) {
    constexpr int W = PA_TILE_ROW_ELEMS;
    return (c / W) * ROWS * W + r * W + ((((c % W) / PA_TILE_CHUNK) ^ (r % 8)) * PA_TILE_CHUNK);
}
// Zero rows [from, ROWS) of a ROWS-row tile: thread `id` of `threads` takes every threads-th 16-byte chunk.
template <int ROWS>
PA_DEVICE void pa_tile_zero_rows(pa_elem* tile, int from, int id, int threads) {
    constexpr int CHUNKS = PA_HEAD_DIM / PA_TILE_CHUNK;  // of a row
#pragma unroll 1
    for (int i = max(from, 0) * CHUNKS + id; i < ROWS * CHUNKS; i += threads)
        *reinterpret_cast<float4*>(tile + pa_tile_offset<ROWS>(i / CHUNKS, i % CHUNKS * PA_TILE_CHUNK)) = pa_zero4();
}
#endif

#if PA_MMA_WGMMA
static_assert(PA_HEAD_DIM % 16 == 0, "the warpgroup MMA tiles need a head dim that is a multiple of 16");
#if defined(PA_THREADS)
static_assert(PA_THREADS % 128 == 0, "the warpgroup MMA needs whole warpgroups (128 threads)");
static_assert(PA_KEY_WAVES == 1, "the warpgroup MMA tiles split rows, not keys, between waves");
#endif
#define PA_TILE_ASYNC 1   // tile products: start / wait (below)
#define PA_TILE_STAGES 2  // K and V buffers
// The first tile: dynamic shared memory rounded up to 1024 bytes (the host adds 1024 - 16 bytes for it).
PA_DEVICE pa_elem* pa_tile_base(void* smem) {
    const unsigned pad = (1024 - pa_smem_addr(smem) % 1024) % 1024;
    return reinterpret_cast<pa_elem*>(static_cast<char*>(smem) + pad);
}
// Operand start of rows r.. and columns c.. (r a multiple of 8, c of 32 bytes' worth), in elements from the tile's
// start: the unit applies the swizzle itself.
template <int ROWS>
PA_DEVICE int pa_tile_operand_offset(int r, int c) {
    constexpr int W = PA_TILE_ROW_ELEMS;
    return (c / W) * ROWS * W + r * W + c % W;
}
template <int ROWS>
PA_DEVICE const pa_elem* pa_tile_operand(const pa_elem* tile, int r, int c) {
    return tile + pa_tile_operand_offset<ROWS>(r, c);
}
// The descriptor of that operand: the tile's own descriptor with its start address field moved by the operand's
// offset (it cannot carry: shared addresses are below 2^18), so that the steps of a product share the tile's part.
template <int ROWS>
PA_DEVICE unsigned long long pa_tile_desc(const pa_elem* tile, int r, int c, unsigned lbo_bytes) {
    const unsigned offset = (unsigned)pa_tile_operand_offset<ROWS>(r, c) * (unsigned)sizeof(pa_elem);
    return pa_wgmma_desc_of(pa_wgmma_desc_lo(pa_smem_addr(tile), lbo_bytes) + offset / 16);
}
template <int MT>
PA_DEVICE int pa_wave_row(int mt) {
    return (pa_wave_id() / 4) * MT * 64 + mt * 64 + (pa_wave_id() % 4) * PA_MMA_M;
}

// The tile products are asynchronous: *_start issues them and returns, the waits below complete them. Q K^T
// writes the scores and P V the output accumulators behind the compiler's back: neither may be touched between a
// start and its wait, and the A fragments of P V must stay unchanged until it completes. Q K^T overwrites s.
// float32: q_s and k_s are split tiles, and each product is three TF32 products (small x big, big x small, big x
// big). The unit's float accumulation truncates, so P·V overwrites acc with the tile's own sum, which the caller
// adds to its output; v_s is the split transposed V (PA_HEAD_DIM rows of BN keys).
// Q K^T of head-dim columns k0 .. k0 + PA_MMA_K - 1 for the group's 64 rows from `row` (the first step overwrites s).
template <int BM, int BN>
PA_DEVICE void pa_tile_qk_step(float* s, const pa_elem* q_s, const pa_elem* k_s, int row, int k0) {
    const unsigned long long qb = pa_tile_desc<BM>(q_s, row, k0, 16);
    const unsigned long long kb = pa_tile_desc<BN>(k_s, 0, k0, 16);
#if PA_F32
    pa_wgmma_ss<BN>(s, pa_tile_desc<BM>(q_s + pa_tile_elems<BM>(), row, k0, 16), kb, k0 > 0);
    pa_wgmma_ss<BN>(s, qb, pa_tile_desc<BN>(k_s + pa_tile_elems<BN>(), 0, k0, 16), 1);
    pa_wgmma_ss<BN>(s, qb, kb, 1);
#else
    pa_wgmma_ss<BN>(s, qb, kb, k0 > 0);
#endif
}
// P V of keys k0 .. k0 + PA_MMA_K - 1 into the PV_N output columns from c0 (float32: the first step overwrites d).
template <int PV_N, int BN>
PA_DEVICE void pa_tile_pv_step(float* d, const pa_mma_a& a, const pa_elem* v_s, int k0, int c0) {
#if PA_F32
    const unsigned long long vb = pa_tile_desc<PA_HEAD_DIM>(v_s, c0, k0, 16);
    pa_wgmma_rs<PV_N>(d, a.small, vb, k0 > 0);
    pa_wgmma_rs<PV_N>(d, a.big, pa_tile_desc<PA_HEAD_DIM>(v_s + PA_HEAD_DIM * BN, c0, k0, 16), 1);
    pa_wgmma_rs<PV_N>(d, a.big, vb, 1);
#else
    pa_wgmma_rs<PV_N>(d, a, pa_tile_desc<BN>(v_s, k0, c0, BN * 128));
#endif
}
template <int MT, int SN, int BM, int BN>
PA_DEVICE void pa_tile_qk_start(pa_mma_c (&s)[MT][SN], const pa_elem* q_s, const pa_elem* k_s) {
    static_assert(SN * PA_MMA_N == BN, "score fragments must cover the key tile");
    pa_wgmma_fence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int row = pa_wave_row<MT>(mt) - (pa_wave_id() % 4) * PA_MMA_M;  // the group's 64-row tile
#pragma unroll
        for (int k0 = 0; k0 < PA_HEAD_DIM; k0 += PA_MMA_K) pa_tile_qk_step<BM, BN>(&s[mt][0][0], q_s, k_s, row, k0);
    }
    pa_wgmma_commit();
}
// P V in products of at most 128 output columns (the accumulators of columns c.. start at fragment c / PA_MMA_N): the
// ON * PA_MMA_N columns of v_s from its first (the backward's column slices start v_s at theirs).
template <int MT, int ON, int BN>
PA_DEVICE void pa_tile_pv_start(pa_mma_c (&acc)[MT][ON], const pa_mma_a (&a)[MT][BN / PA_MMA_K], const pa_elem* v_s) {
    constexpr int COLS = ON * PA_MMA_N;
    constexpr int PV_N = COLS < 128 ? COLS : 128;
    static_assert(COLS % PV_N == 0, "unsupported warpgroup MMA head dim");
    pa_wgmma_fence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < BN / PA_MMA_K; ++kk)
#pragma unroll
            for (int c0 = 0; c0 < COLS; c0 += PV_N)
                pa_tile_pv_step<PV_N, BN>(&acc[mt][c0 / PA_MMA_N][0], a[mt][kk], v_s, kk * PA_MMA_K, c0);
    pa_wgmma_commit();
}
// Wait for the scores: Q K^T started before the last PENDING products (which may go on).
template <int PENDING, int MT, int SN>
PA_DEVICE void pa_tile_wait_scores(pa_mma_c (&s)[MT][SN]) {
    pa_wgmma_wait<PENDING>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) pa_wgmma_settle<SN * 4>(&s[mt][0][0]);
}
// Wait for everything started.
template <int MT, int ON>
PA_DEVICE void pa_tile_wait_all(pa_mma_c (&acc)[MT][ON]) {
    pa_wgmma_wait<0>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) pa_wgmma_settle<ON * 4>(&acc[mt][0][0]);
}
#else
#define PA_TILE_ASYNC 0   // tile products complete before they return
#define PA_TILE_STAGES 1  // K and V buffers
PA_DEVICE pa_elem* pa_tile_base(void* smem) { return static_cast<pa_elem*>(smem); }
#if PA_TILE_SWIZZLED
// Swizzled tiles (NVIDIA mma.sync, 16-bit, head dims a multiple of 64; the host asks for them), in the layout above.
// Each row's copies land in runs of 128 bytes (on 128-byte boundaries where the tile starts on one, as dynamic shared
// memory does here), so a warp's copies of two 256-byte rows go out as whole 128-byte L2 requests (padded rows split
// them and read about 1.5 times the sectors), and the fragment loads stay free of bank conflicts: each lane hands
// ldmatrix its own element.
#if !defined(PA_MMA_LANE_ADDRESSES) || PA_F32 || PA_HEAD_DIM % 64 != 0
#error "swizzled tiles need 16-bit mma.sync fragments and a head dim that is a multiple of 64"
#endif
// This lane's element of the 16x16 tile at (r0, c0) of a ROWS-row tile, where e is the lane's element within it
// (pa_mma_lane_*). r0 is a multiple of 8 and c0 of 16 columns, so the chunk permutation depends on the lane alone:
// pa_tile_offset<ROWS>(r0 + e.r, c0 + e.c) with one XOR per load (r0 may be known only at run time).
template <int ROWS>
PA_DEVICE const pa_elem* pa_tile_lane_elem(const pa_elem* tile, int r0, int c0, PaLaneElem e) {
    constexpr int W = PA_TILE_ROW_ELEMS;
    const int lane_chunk = (e.c / PA_TILE_CHUNK) ^ (e.r % 8);
    return tile + (c0 / W) * ROWS * W + (r0 + e.r) * W + (((c0 % W) / PA_TILE_CHUNK) ^ lane_chunk) * PA_TILE_CHUNK;
}
// The fragments of the 16x16 tile at (r0, c0) of a ROWS-row tile (REST: split tiles, below, are not swizzled).
template <int ROWS, int REST = 0>
PA_DEVICE void pa_tile_load_a(pa_mma_a& a, const pa_elem* tile, int r0, int c0) {
    static_assert(REST == 0, "swizzled tiles are not split");
    pa_mma_load_a_at(a, pa_tile_lane_elem<ROWS>(tile, r0, c0, pa_mma_lane_a()));
}
template <int ROWS>
PA_DEVICE void pa_tile_load_b_nk(pa_mma_b& b, const pa_elem* tile, int r0, int c0) {
    pa_mma_load_b_nk_at(b, pa_tile_lane_elem<ROWS>(tile, r0, c0, pa_mma_lane_b_nk()));
}
template <int ROWS, int REST = 0>
PA_DEVICE void pa_tile_load_b_kn(pa_mma_b& b, const pa_elem* tile, int r0, int c0) {
    static_assert(REST == 0, "swizzled tiles are not split");
    pa_mma_load_b_kn_at(b, pa_tile_lane_elem<ROWS>(tile, r0, c0, pa_mma_lane_b_kn()));
}
#else
constexpr int PA_TILE_LD = PA_HEAD_DIM + PA_TILE_CHUNK;  // padded row (elements)
template <int ROWS>
__host__ __device__ constexpr int pa_tile_elems() {
    return ROWS * PA_TILE_LD;
}
template <int ROWS>
PA_DEVICE int pa_tile_offset(int r, int c) {
    return r * PA_TILE_LD + c;
}
// The fragment loads below with REST > 0 read a split tile (float32 on NVIDIA's matrix units, pa_tile_split4): the
// TF32 parts at tile, their rests REST elements further.
template <int ROWS, int REST = 0>
PA_DEVICE void pa_tile_load_a(pa_mma_a& a, const pa_elem* tile, int r0, int c0) {
#if PA_MMA_TF32
    if constexpr (REST > 0) {
        pa_mma_load_a_parts(a, tile + pa_tile_offset<ROWS>(r0, c0), REST, PA_TILE_LD);
        return;
    }
#else
    static_assert(REST == 0, "split tiles are for float32 on NVIDIA's matrix units");
#endif
    pa_mma_load_a(a, tile + pa_tile_offset<ROWS>(r0, c0), PA_TILE_LD);
}
template <int ROWS>
PA_DEVICE void pa_tile_load_b_nk(pa_mma_b& b, const pa_elem* tile, int r0, int c0) {
    pa_mma_load_b_nk(b, tile + pa_tile_offset<ROWS>(r0, c0), PA_TILE_LD);
}
template <int ROWS, int REST = 0>
PA_DEVICE void pa_tile_load_b_kn(pa_mma_b& b, const pa_elem* tile, int r0, int c0) {
#if PA_MMA_TF32
    if constexpr (REST > 0) {
        pa_mma_load_b_kn_parts(b, tile + pa_tile_offset<ROWS>(r0, c0), REST, PA_TILE_LD);
        return;
    }
#else
    static_assert(REST == 0, "split tiles are for float32 on NVIDIA's matrix units");
#endif
    pa_mma_load_b_kn(b, tile + pa_tile_offset<ROWS>(r0, c0), PA_TILE_LD);
}
#endif  // PA_TILE_SWIZZLED
template <int MT>
PA_DEVICE int pa_wave_row(int mt) {
    return (pa_wave_id() / PA_KEY_WAVES * MT + mt) * PA_MMA_M;
}

template <int MT, int SN, int BM, int BN, int Q_REST = 0>
PA_DEVICE void pa_tile_qk(pa_mma_c (&s)[MT][SN], const pa_elem* q_s, const pa_elem* k_s, int k_row0 = 0) {
    pa_mma_c_zero(s);
// Two head-dim steps at a time: unrolling all of them lets the fragment loads run ahead and spill in most kernels;
// tiles that fit them ask for it (PA_QK_UNROLL_ALL).
#if PA_QK_UNROLL_ALL
#pragma unroll
#else
#pragma unroll 2
#endif
    for (int k0 = 0; k0 < PA_HEAD_DIM; k0 += PA_MMA_K) {
        pa_mma_a a[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) pa_tile_load_a<BM, Q_REST>(a[mt], q_s, pa_wave_row<MT>(mt), k0);
#pragma unroll
        for (int j = 0; j < SN; j += PA_MMA_B_TILES) {
            pa_mma_b kb;
            pa_tile_load_b_nk<BN>(kb, k_s, k_row0 + j * PA_MMA_N, k0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(s[mt][j + t], a[mt], kb, t);
        }
    }
}

template <int MT, int ON, int BN, int SN, int ROWS = BN>
PA_DEVICE void pa_tile_pv(pa_mma_c (&acc)[MT][ON], const pa_mma_c (&p)[MT][SN], const pa_elem* v_s, int v_row0 = 0) {
    if constexpr (PA_MMA_ACC_TRUNCATES) {
        // The unit's float accumulation truncates: each tile's P V is summed in fresh fragments and added to the
        // running output with ordinary (round-to-nearest) float additions, so the rounding error does not grow
        // with the number of keys.
        pa_mma_a a[MT][BN / PA_MMA_K];
        pa_tile_to_a(a, p);
#pragma unroll
        for (int j = 0; j < ON; j += PA_MMA_B_TILES) {
            pa_mma_c part[MT][PA_MMA_B_TILES];
            pa_mma_c_zero(part);
#pragma unroll
            for (int kk = 0; kk < BN / PA_MMA_K; ++kk) {
                pa_mma_b vb;
                pa_tile_load_b_kn<ROWS>(vb, v_s, v_row0 + kk * PA_MMA_K, j * PA_MMA_N);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(part[mt][t], a[mt][kk], vb, t);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int t = 0; t < PA_MMA_B_TILES; ++t)
#pragma unroll
                    for (int i = 0; i < PA_MMA_C_REGS; ++i) acc[mt][j + t][i] += part[mt][t][i];
        }
    } else {
#pragma unroll
        for (int k0 = 0; k0 < BN; k0 += PA_MMA_K) {
            pa_mma_a a[MT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) pa_mma_a_from_c(a[mt], p[mt], k0);
#pragma unroll
            for (int j = 0; j < ON; j += PA_MMA_B_TILES) {
                pa_mma_b vb;
                pa_tile_load_b_kn<ROWS>(vb, v_s, v_row0 + k0, j * PA_MMA_N);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(acc[mt][j + t], a[mt], vb, t);
            }
        }
    }
}
#endif  // PA_MMA_WGMMA

// Store row rr of this lane's fragments c as floats (columns of fragment j start at j * PA_MMA_N), times `scale`;
// `row` is aligned to two floats.
template <int ON>
PA_DEVICE void pa_tile_store_row_f32(float* row, const pa_mma_c (&c)[ON], int rr, float scale) {
    const int i = rr * PA_MMA_C_COLS;
#pragma unroll
    for (int j = 0; j < ON; ++j) {
        if constexpr (PA_MMA_C_COLS == 2) {  // two adjacent columns: one 8-byte store
            *reinterpret_cast<float2*>(row + j * PA_MMA_N + pa_mma_c_col(0)) =
                make_float2(c[j][i] * scale, c[j][i + 1] * scale);
        } else {
#pragma unroll
            for (int e = 0; e < PA_MMA_C_COLS; ++e) row[j * PA_MMA_N + pa_mma_c_col(e)] = c[j][i + e] * scale;
        }
    }
}

// Store row rr of this lane's output fragments c (columns of fragment j start at j * PA_MMA_N), times `scale`.
template <int ON>
PA_DEVICE void pa_tile_store_row(pa_elem* row, const pa_mma_c (&c)[ON], int rr, float scale) {
    const int i = rr * PA_MMA_C_COLS;
#pragma unroll
    for (int j = 0; j < ON; ++j) {
        if constexpr (PA_MMA_C_COLS == 2) {  // two adjacent columns: one paired store
            pa_store_elem2(row + j * PA_MMA_N + pa_mma_c_col(0), c[j][i] * scale, c[j][i + 1] * scale);
        } else {
#pragma unroll
            for (int e = 0; e < PA_MMA_C_COLS; ++e)
                pa_store_elem(row + j * PA_MMA_N + pa_mma_c_col(e), c[j][i + e] * scale);
        }
    }
}

#if PA_MMA_WGMMA && !PA_F32
// This warp's 16 rows of output fragments c, row rr times scale[rr], as 16-bit elements into the swizzled ROWS-row
// tile `tile` from row row0 (one matrix store per 16 columns; matrix m of a store holds rows 8 (m % 2) .. and
// columns 8 (m / 2) .. of the pair of fragments, as pa_mma_a_from_c packs them).
template <int ROWS, int ON>
PA_DEVICE void pa_tile_store_rows_smem(pa_elem* tile, const pa_mma_c (&c)[ON], int row0,
                                       const float (&scale)[PA_MMA_C_ROWS]) {
    static_assert(ON % 2 == 0, "whole 16-column blocks");
    const int lane = pa_lane_id(), row = row0 + lane / 8 % 2 * 8 + lane % 8;
#pragma unroll
    for (int j = 0; j < ON; j += 2) {
        pa_mma_c scaled[2];
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int i = 0; i < PA_MMA_C_REGS; ++i) scaled[t][i] = c[j + t][i] * scale[i / PA_MMA_C_COLS];
        pa_mma_a packed;
        pa_mma_a_from_c(packed, scaled, 0);
        pa_stmatrix_x4(packed, tile + pa_tile_offset<ROWS>(row, (j + lane / 16) * PA_MMA_N));
    }
}
#endif

// Copies of ROWS x PA_HEAD_DIM tiles into shared memory, 16 bytes per copy, spread over the block's PA_THREADS threads.
// With few copies per thread their offsets are computed once and kept (each tile then costs a few instructions per
// copy); with many they are recomputed, which saves the registers. A STREAMED loader (one that loads a tile per
// step of a kernel's loop) whose threads each copy one column of every PA_THREADS / CHUNKS-th row derives each
// copy's offsets from its row alone, without the division and remainder, so that a tile costs a few instructions
// per copy there too.
template <int ROWS, bool STREAMED = false>
struct PaTileLoader {
    static constexpr int CHUNKS = PA_HEAD_DIM / PA_TILE_CHUNK;  // 16-byte chunks per row
    static constexpr int TOTAL = ROWS * CHUNKS;
    static constexpr int COPIES = (TOTAL + PA_THREADS - 1) / PA_THREADS;  // per thread (the last round may be partial)
    static constexpr bool KEEP = COPIES <= 4;
    static constexpr bool FIXED_COLUMN = STREAMED && !KEEP && PA_THREADS % CHUNKS == 0;
    static constexpr int KEPT = KEEP ? COPIES : 1;
    int smem[KEPT], row[KEPT], col[KEPT];

    PA_DEVICE PaTileLoader() {
#pragma unroll
        for (int i = 0; i < KEPT; ++i) {
            const int idx = (int)threadIdx.x + i * PA_THREADS;
            row[i] = idx / CHUNKS;
            col[i] = idx % CHUNKS * PA_TILE_CHUNK;
            smem[i] = row[i] < ROWS ? pa_tile_offset<ROWS>(row[i], col[i]) : 0;
        }
    }
    // Start copying the rows given by row_of(r) (a pointer to row r, for r < valid); rows at or past `valid` become
    // zeros.
    template <class RowOf>
    PA_DEVICE void start_rows(pa_elem* tile, const RowOf& row_of, int valid) const {
        if constexpr (KEEP) {
#pragma unroll
            for (int i = 0; i < COPIES; ++i) {
                if (TOTAL % PA_THREADS != 0 && i == COPIES - 1 && (int)threadIdx.x >= TOTAL - i * PA_THREADS) break;
                const bool ok = row[i] < valid;
                pa_async_copy16(tile + smem[i], ok ? row_of(row[i]) + col[i] : nullptr, ok);
            }
        } else if constexpr (FIXED_COLUMN) {
            const int r0 = (int)threadIdx.x / CHUNKS, c = (int)threadIdx.x % CHUNKS * PA_TILE_CHUNK;
#pragma unroll 1  // unrolled, the copies hold more registers and are no faster
            for (int i = 0; i < COPIES; ++i) {
                const int r = r0 + i * (PA_THREADS / CHUNKS);
                if (TOTAL % PA_THREADS != 0 && r >= ROWS) break;
                const bool ok = r < valid;
                pa_async_copy16(tile + pa_tile_offset<ROWS>(r, c), ok ? row_of(r) + c : nullptr, ok);
            }
        } else {
            for (int idx = threadIdx.x; idx < TOTAL; idx += PA_THREADS) {
                const int r = idx / CHUNKS, c = idx % CHUNKS * PA_TILE_CHUNK;
                const bool ok = r < valid;
                pa_async_copy16(tile + pa_tile_offset<ROWS>(r, c), ok ? row_of(r) + c : nullptr, ok);
            }
        }
    }
    // start_rows for the rows of two tiles read once whose addresses share a costly part (decode's K and V cache
    // rows: a page-table lookup): locate(r) works that part out for row r, and a_of and b_of turn what it returns
    // into row r's pointers for tile_a and tile_b. Where a thread copies many rows, lane r of each wave locates row r
    // once for both tiles, the copies take the addresses from that lane, and they carry the read-once hints
    // (pa_async_copy16_once).
    template <class Locate, class AOf, class BOf>
    PA_DEVICE void start_pair_once(pa_elem* tile_a, pa_elem* tile_b, const Locate& locate, const AOf& a_of,
                                   const BOf& b_of, int valid) const {
        if constexpr (!KEEP && ROWS <= PA_WARP_SIZE && TOTAL % PA_THREADS == 0) {
            const int mine = pa_lane_id() % ROWS;
            const pa_elem *mine_a = nullptr, *mine_b = nullptr;
            if (mine < valid) {
                const auto at = locate(mine);
                mine_a = a_of(at);
                mine_b = b_of(at);
            }
            start_lane_rows(tile_a, mine_a, valid);
            start_lane_rows(tile_b, mine_b, valid);
        } else {
            start_rows(tile_a, [&](int r) { return a_of(locate(r)); }, valid);
            start_rows(tile_b, [&](int r) { return b_of(locate(r)); }, valid);
        }
    }
    // Start copying the rows lane r of each wave points to with `mine` (start_pair_once), with the read-once hints.
    PA_DEVICE void start_lane_rows(pa_elem* tile, const pa_elem* mine, int valid) const {
#pragma unroll
        for (int i = 0; i < COPIES; ++i) {
            const int idx = (int)threadIdx.x + i * PA_THREADS;
            const int r = idx / CHUNKS, c = idx % CHUNKS * PA_TILE_CHUNK;
            const pa_elem* src = static_cast<const pa_elem*>(pa_shfl_ptr(mine, r, PA_WARP_SIZE));
            pa_async_copy16_once(tile + pa_tile_offset<ROWS>(r, c), src + c, r < valid);
        }
    }
    // Start copying rows of `src` (row stride `stride`); rows at or past `valid` become zeros.
    PA_DEVICE void start(pa_elem* tile, const pa_elem* src, pa_i64 stride, int valid) const {
        start_rows(tile, [=](int r) { return src + r * stride; }, valid);
    }
};
