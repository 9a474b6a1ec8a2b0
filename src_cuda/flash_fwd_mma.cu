// FlashAttention forward on the matrix units: float16, bfloat16 (PA_BF16) or float32 (PA_F32) inputs, float32
// accumulation and softmax.
//
// The matrix-unit tiles come from pa_mma.cuh (NVIDIA mma.sync or AMD MFMA). One block computes PA_BLOCK_M query
// rows of one (batch, head); each wave owns MT tiles of PA_MMA_M rows. Q stays in shared memory; K and V tiles of
// PA_BLOCK_N keys stream through one buffer each, loaded asynchronously: V of tile j while the scores of tile j are
// computed, K of tile j+1 while the softmax and P·V of tile j run. Scores stay in registers and become the A
// operand of P·V directly; online softmax in base 2.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_BF16, PA_F32.
#include "pa_mma.cuh"
#include "pa_params.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_THREADS)
#error "PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N and PA_THREADS must be defined by the host"
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
constexpr int PER16 = 16 / (int)sizeof(pa_elem);  // elements per 16 bytes
constexpr int LD = D + PER16;                // padded row (elements): 16 extra bytes keep fragment loads conflict-free
constexpr int CHUNKS = D / PER16;            // 16-byte chunks per row

constexpr int C_REGS = PA_MMA_C_ROWS * PA_MMA_C_COLS;
constexpr float RESCALE_SLACK = 8.f;         // log2 units: probabilities stay <= 256, fine for float16 operands

static_assert(NT % PA_WARP_SIZE == 0 && MT >= 1 && BM == WAVES * PA_MMA_M * MT, "bad PA_BLOCK_M / PA_THREADS");
static_assert(SN % PA_MMA_B_TILES == 0 && BN % PA_MMA_K == 0, "unsupported PA_BLOCK_N");
static_assert(D % PA_MMA_K == 0 && ON % PA_MMA_B_TILES == 0, "unsupported PA_HEAD_DIM");

// Start copying `rows` rows of D elements (row stride `stride`) into a padded shared tile; rows at or past `valid`
// become zeros.
PA_DEVICE void load_tile_async(pa_elem* tile, const pa_elem* src, pa_i64 stride, int rows, int valid) {
    for (int idx = threadIdx.x; idx < rows * CHUNKS; idx += NT) {
        const int r = idx / CHUNKS;
        const int c = (idx % CHUNKS) * PER16;
        const bool ok = r < valid;
        pa_async_copy16(tile + r * LD + c, ok ? src + (pa_i64)r * stride + c : src, ok);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, 1) pa_flash_fwd_mma(const PaFwdParams p) {
    extern __shared__ float4 pa_smem4[];
    pa_elem* q_s = reinterpret_cast<pa_elem*>(pa_smem4);  // [BM][LD]
    pa_elem* k_s = q_s + BM * LD;                          // [BN][LD]
    pa_elem* v_s = k_s + BN * LD;                          // [BN][LD]

    const PaBlock blk = pa_block_coords(p, BM);
    const int b = blk.b, h = blk.h, h_kv = blk.h_kv, row0 = blk.row0;
    const int wave_row0 = pa_wave_id() * MT * PA_MMA_M;

    const pa_elem* q = static_cast<const pa_elem*>(p.q) + b * p.q_sb + h * p.q_sh + (pa_i64)row0 * p.q_sn;
    const pa_elem* k = static_cast<const pa_elem*>(p.k) + b * p.k_sb + h_kv * p.k_sh;
    const pa_elem* v = static_cast<const pa_elem*>(p.v) + b * p.v_sb + h_kv * p.v_sh;

    const int n_end = p.causal ? min(p.seqlen_k, row0 + BM) : p.seqlen_k;
    const int n_tiles = (n_end + BN - 1) / BN;

    load_tile_async(q_s, q, p.q_sn, BM, p.seqlen_q - row0);
    load_tile_async(k_s, k, p.k_sn, BN, p.seqlen_k);
    pa_async_commit();

    pa_mma_c acc[MT][ON];
    float row_max[MT][PA_MMA_C_ROWS];
    float row_sum[MT][PA_MMA_C_ROWS];  // this lane's partial sums over its score columns
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
            row_max[mt][r] = pa_neg_inf();
            row_sum[mt][r] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < ON; ++j)
#pragma unroll
            for (int i = 0; i < C_REGS; ++i) acc[mt][j][i] = 0.f;
    }

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int n0 = tile * BN;
        pa_async_wait<0>();
        __syncthreads();  // K of this tile has landed; every wave is done with the previous V
        load_tile_async(v_s, v + (pa_i64)n0 * p.v_sn, p.v_sn, BN, p.seqlen_k - n0);
        pa_async_commit();

        pa_mma_c s[MT][SN];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < SN; ++j)
#pragma unroll
                for (int i = 0; i < C_REGS; ++i) s[mt][j][i] = 0.f;
#pragma unroll 2  // unrolling all of D lets the fragment loads run ahead and spill
        for (int k0 = 0; k0 < D; k0 += PA_MMA_K) {
            pa_mma_a a[MT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) pa_mma_load_a(a[mt], q_s + (wave_row0 + mt * PA_MMA_M) * LD + k0, LD);
#pragma unroll
            for (int j = 0; j < SN; j += PA_MMA_B_TILES) {
                pa_mma_b kb;
                pa_mma_load_b_nk(kb, k_s + j * PA_MMA_N * LD + k0, LD);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(s[mt][j + t], a[mt], kb, t);
            }
        }

        // Online softmax (base 2). Masked and padded keys score -inf.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
                const int row = row0 + wave_row0 + mt * PA_MMA_M + pa_mma_c_row(r);
                const int key_end = p.causal ? min(p.seqlen_k, row + 1) : p.seqlen_k;  // keys visible to the row
                float tile_max = pa_neg_inf();
#pragma unroll
                for (int j = 0; j < SN; ++j)
#pragma unroll
                    for (int e = 0; e < PA_MMA_C_COLS; ++e) {
                        const int key = n0 + j * PA_MMA_N + pa_mma_c_col(e);
                        const bool visible = key < key_end;
                        const float x = visible ? s[mt][j][r * PA_MMA_C_COLS + e] * p.scale_log2 : pa_neg_inf();
                        s[mt][j][r * PA_MMA_C_COLS + e] = x;
                        tile_max = fmaxf(tile_max, x);
                    }
                tile_max = pa_group_max<PA_MMA_ROW_LANES>(tile_max);
                // The running maximum moves only when a score exceeds it by more than RESCALE_SLACK: until then
                // probabilities stay below 2^RESCALE_SLACK and the output and sums need no rescaling.
                if (tile_max > row_max[mt][r] + RESCALE_SLACK) {
                    const float rescale = pa_exp2(row_max[mt][r] - tile_max);
                    row_max[mt][r] = tile_max;
                    row_sum[mt][r] *= rescale;
#pragma unroll
                    for (int j = 0; j < ON; ++j)
#pragma unroll
                        for (int e = 0; e < PA_MMA_C_COLS; ++e) acc[mt][j][r * PA_MMA_C_COLS + e] *= rescale;
                }
                const float base = row_max[mt][r] == pa_neg_inf() ? 0.f : row_max[mt][r];  // all masked so far
                float part = 0.f;
#pragma unroll
                for (int j = 0; j < SN; ++j)
#pragma unroll
                    for (int e = 0; e < PA_MMA_C_COLS; ++e) {
                        const float x = pa_exp2(s[mt][j][r * PA_MMA_C_COLS + e] - base);
                        s[mt][j][r * PA_MMA_C_COLS + e] = x;
                        part += x;
                    }
                row_sum[mt][r] += part;
            }
        }

        pa_async_wait<0>();
        __syncthreads();  // V of this tile has landed; every wave is done with K
        if (tile + 1 < n_tiles) {
            load_tile_async(k_s, k + (pa_i64)(n0 + BN) * p.k_sn, p.k_sn, BN, p.seqlen_k - n0 - BN);
            pa_async_commit();
        }

        if constexpr (PA_MMA_ACC_TRUNCATES) {
            // The matrix unit's float accumulation truncates: each tile's P·V is summed in fresh fragments and
            // added to the running output with ordinary (round-to-nearest) float additions, so the rounding error
            // does not grow with the number of keys.
            pa_mma_a a[MT][BN / PA_MMA_K];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < BN / PA_MMA_K; ++kk) pa_mma_a_from_c(a[mt][kk], s[mt], kk * PA_MMA_K);
#pragma unroll
            for (int j = 0; j < ON; j += PA_MMA_B_TILES) {
                pa_mma_c part[MT][PA_MMA_B_TILES];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int t = 0; t < PA_MMA_B_TILES; ++t)
#pragma unroll
                        for (int i = 0; i < C_REGS; ++i) part[mt][t][i] = 0.f;
#pragma unroll
                for (int kk = 0; kk < BN / PA_MMA_K; ++kk) {
                    pa_mma_b vb;
                    pa_mma_load_b_kn(vb, v_s + kk * PA_MMA_K * LD + j * PA_MMA_N, LD);
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
                        for (int i = 0; i < C_REGS; ++i) acc[mt][j + t][i] += part[mt][t][i];
            }
        } else {
#pragma unroll
            for (int k0 = 0; k0 < BN; k0 += PA_MMA_K) {
                pa_mma_a a[MT];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) pa_mma_a_from_c(a[mt], s[mt], k0);
#pragma unroll
                for (int j = 0; j < ON; j += PA_MMA_B_TILES) {
                    pa_mma_b vb;
                    pa_mma_load_b_kn(vb, v_s + k0 * LD + j * PA_MMA_N, LD);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int t = 0; t < PA_MMA_B_TILES; ++t) pa_mma(acc[mt][j + t], a[mt], vb, t);
                }
            }
        }
    }

    pa_elem* o = static_cast<pa_elem*>(p.o) + b * p.o_sb + h * p.o_sh;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < PA_MMA_C_ROWS; ++r) {
            const int row = row0 + wave_row0 + mt * PA_MMA_M + pa_mma_c_row(r);
            const float total = pa_group_sum<PA_MMA_ROW_LANES>(row_sum[mt][r]);
            if (row >= p.seqlen_q) continue;
            const float inv = 1.f / total;
            pa_elem* o_row = o + (pa_i64)row * p.o_sn;
#pragma unroll
            for (int j = 0; j < ON; ++j)
#pragma unroll
                for (int e = 0; e < PA_MMA_C_COLS; ++e)
                    pa_store_elem(o_row + j * PA_MMA_N + pa_mma_c_col(e), acc[mt][j][r * PA_MMA_C_COLS + e] * inv);
            if (p.lse != nullptr && pa_mma_c_col(0) == 0) {
                const float base = row_max[mt][r] == pa_neg_inf() ? 0.f : row_max[mt][r];
                p.lse[((pa_i64)b * p.heads_q + h) * p.seqlen_q + row] = (base + pa_log2(total)) * PA_LN2;
            }
        }
    }
}
