// FlashAttention forward, float32, SIMT (no matrix units): the portable baseline kernel.
//
// One block computes PA_BLOCK_M query rows of one (batch, head). Key/value tiles of PA_BLOCK_N rows stream
// through one shared-memory buffer; scores are kept in registers with an online (running max / running sum)
// softmax in base 2, and the output is normalised once at the end.
//
// Thread layout: PA_ROW_LANES lanes share a row group ("tx", along keys and head-dim columns), PA_THREADS /
// PA_ROW_LANES row groups ("ty"). Each thread owns ROWS query rows, KEYS key columns of the score tile and COLS
// output columns; row maxima and sums are reduced across the row group's lanes.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_ROW_LANES, PA_SMEM_BYTES,
// PA_MASK_EXT (variable lengths, sliding windows, softcap, ALiBi, attention masks; pa_fwd_params.cuh).
#include "pa_fwd_params.cuh"
#include "pa_simt.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_THREADS) || \
    !defined(PA_ROW_LANES) || !defined(PA_SMEM_BYTES)
#error "PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_ROW_LANES and PA_SMEM_BYTES must be defined by the host"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;
constexpr int BN = PA_BLOCK_N;
constexpr int NT = PA_THREADS;
constexpr int TX = PA_ROW_LANES;                                       // lanes across one row group
constexpr int TY = NT / TX;                                            // row groups
constexpr int ROWS = BM / TY;                                          // query rows per thread
constexpr int KEYS = BN / TX;                                          // score columns per thread
constexpr int VW = D % (TX * 4) == 0 ? 4 : D % (TX * 2) == 0 ? 2 : 1;  // vector width of an output chunk
constexpr int CHUNKS = D / (TX * VW);                                  // output-column chunks per thread
constexpr int COLS = CHUNKS * VW;                                      // output columns per thread
constexpr int LD = PA_SIMT_LD;  // padded row length of the Q and K/V tiles (floats)
constexpr int LDP = BN + 4;     // padded row length of the probability tile

static_assert(NT % TX == 0 && BM % TY == 0, "PA_BLOCK_M must be a multiple of PA_THREADS / PA_ROW_LANES");
static_assert(BN % TX == 0, "PA_BLOCK_N must be a multiple of PA_ROW_LANES");
static_assert(D % 4 == 0 && D % TX == 0, "PA_HEAD_DIM must be a multiple of 4 and of PA_ROW_LANES");
static_assert(NT % PA_WARP_SIZE == 0, "PA_THREADS must be a whole number of waves");
static_assert(TX <= PA_WARP_SIZE, "a row group must fit in one wave");
static_assert(PA_SMEM_BYTES == 4 * (BM * LD + BN * LD + BM * LDP),
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS) pa_flash_fwd_simt(const PaFwdParams p) {
    extern __shared__ float4 pa_smem4[];
    float* q_s = reinterpret_cast<float*>(pa_smem4);  // [BM][LD]
    float* kv_s = q_s + BM * LD;                      // [BN][LD], holds K then V of the current tile
    float* p_s = kv_s + BN * LD;                      // [BM][LDP]

    const PaBlock blk = pa_block_coords(p, BM);
    const int b = blk.b, h = blk.h, h_kv = blk.h_kv, row0 = blk.row0;
    const PaSeq seq = pa_seq(p, b);
    if (row0 >= seq.seqlen_q) return;  // past the end of a shorter sequence
    const PaMask& mask = seq.mask;
    const PaMod mod = pa_seq_mod(p, seq, b, h);

    const float* q = static_cast<const float*>(p.q) + b * p.q_sb + h * p.q_sh + (seq.q_start + row0) * p.q_sn;
    const float* k = static_cast<const float*>(p.k) + b * p.k_sb + h_kv * p.k_sh + seq.k_start * p.k_sn;
    const float* v = static_cast<const float*>(p.v) + b * p.v_sb + h_kv * p.v_sh + seq.k_start * p.v_sn;

    const int tx = (int)threadIdx.x % TX;
    const int ty = (int)threadIdx.x / TX;

    pa_simt_load_tile(q_s, q, p.q_sn, BM, seq.seqlen_q - row0);

    float acc[ROWS][COLS];
    float row_max[ROWS];
    float row_sum[ROWS];  // this thread's partial sum over its key columns
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        row_max[i] = pa_neg_inf();
        row_sum[i] = 0.f;
#pragma unroll
        for (int c = 0; c < COLS; ++c) acc[i][c] = 0.f;
    }

    const int n_end = pa_mask_rows_key_end(mask, row0, BM);
    for (int n0 = pa_mask_rows_key_begin(mask, row0) / BN * BN; n0 < n_end; n0 += BN) {
        __syncthreads();  // previous V tile fully consumed
        pa_simt_load_tile(kv_s, k + (pa_i64)n0 * p.k_sn, p.k_sn, BN, seq.seqlen_k - n0);
        __syncthreads();

        float s[ROWS][KEYS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
#pragma unroll
            for (int j = 0; j < KEYS; ++j) s[i][j] = 0.f;

#pragma unroll 2
        for (int d0 = 0; d0 < D; d0 += 4) {
            float4 qv[ROWS], kv[KEYS];
#pragma unroll
            for (int i = 0; i < ROWS; ++i) qv[i] = pa_load4(q_s + (ty * ROWS + i) * LD + d0);
#pragma unroll
            for (int j = 0; j < KEYS; ++j) kv[j] = pa_load4(kv_s + (tx + TX * j) * LD + d0);
#pragma unroll
            for (int i = 0; i < ROWS; ++i)
#pragma unroll
                for (int j = 0; j < KEYS; ++j)
                    s[i][j] += qv[i].x * kv[j].x + qv[i].y * kv[j].y + qv[i].z * kv[j].z + qv[i].w * kv[j].w;
        }

        // Online softmax update (base 2). Masked and padded keys score -inf.
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const int row = row0 + ty * ROWS + i;
            const int key_begin = pa_mask_key_begin(mask, row), key_end = pa_mask_key_end(mask, row);
            float tile_max = pa_neg_inf();
#pragma unroll
            for (int j = 0; j < KEYS; ++j) {
                const int key = n0 + tx + TX * j;
                const bool visible = key >= key_begin && key < key_end;
                s[i][j] = visible ? pa_logit2(mod, row, key, s[i][j], p.scale_log2) : pa_neg_inf();
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            tile_max = pa_group_max<TX>(tile_max);
            const float new_max = fmaxf(row_max[i], tile_max);
            const float base = new_max == pa_neg_inf() ? 0.f : new_max;  // all masked so far: keep exp2 finite
            const float rescale = pa_exp2(row_max[i] - base);
            row_max[i] = new_max;
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < KEYS; ++j) {
                s[i][j] = pa_exp2(s[i][j] - base);
                part += s[i][j];
                p_s[(ty * ROWS + i) * LDP + tx + TX * j] = s[i][j];
            }
            row_sum[i] = row_sum[i] * rescale + part;
#pragma unroll
            for (int c = 0; c < COLS; ++c) acc[i][c] *= rescale;
        }

        __syncthreads();  // K tile consumed, probabilities visible
        pa_simt_load_tile(kv_s, v + (pa_i64)n0 * p.v_sn, p.v_sn, BN, seq.seqlen_k - n0);
        __syncthreads();

#pragma unroll 2
        for (int n = 0; n < BN; n += 4) {
            float4 pv[ROWS];
#pragma unroll
            for (int i = 0; i < ROWS; ++i) pv[i] = pa_load4(p_s + (ty * ROWS + i) * LDP + n);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float vv[COLS];
#pragma unroll
                for (int ch = 0; ch < CHUNKS; ++ch)
                    pa_loadv<VW>(kv_s + (n + e) * LD + ch * TX * VW + tx * VW, vv + ch * VW);
#pragma unroll
                for (int i = 0; i < ROWS; ++i) {
                    const float pe = e == 0 ? pv[i].x : e == 1 ? pv[i].y : e == 2 ? pv[i].z : pv[i].w;
#pragma unroll
                    for (int c = 0; c < COLS; ++c) acc[i][c] += pe * vv[c];
                }
            }
        }
    }

    float* o = static_cast<float*>(p.o) + b * p.o_sb + h * p.o_sh + seq.q_start * p.o_sn;
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        const int row = row0 + ty * ROWS + i;
        const float total = pa_group_sum<TX>(row_sum[i]);
        if (row >= seq.seqlen_q) continue;
        const float inv = total > 0.f ? 1.f / total : 0.f;  // a row that sees no key gives zeros
#pragma unroll
        for (int ch = 0; ch < CHUNKS; ++ch)
#pragma unroll
            for (int e = 0; e < VW; ++e)
                o[(pa_i64)row * p.o_sn + ch * TX * VW + tx * VW + e] = acc[i][ch * VW + e] * inv;
        if (p.lse != nullptr && tx == 0)
            p.lse[b * p.lse_sb + h * p.lse_sh + seq.q_start + row] = pa_row_lse(row_max[i], total);
    }
}
