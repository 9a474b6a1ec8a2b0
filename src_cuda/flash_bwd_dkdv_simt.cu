// FlashAttention backward, float32 on SIMT lanes (no matrix units): dK and dV (and, with p.dq_atomic, the sums of
// dQ) for PA_BLOCK_N keys of one (batch, key/value head), over the query heads of its group and all query tiles.
// The portable fallback of flash_bwd_dkdv_mma.cu, with the same block order and the same parameters.
//
// Per query tile of PA_BLOCK_M rows: P^T and dS^T (pa_bwd_simt.cuh) go to shared memory; each thread owns one key
// row's slice of dK and dV (every TPR-th column) and adds P^T dO and dS^T Q into registers; for dQ each thread owns
// one query row's slice and adds dS K with float32 atomics.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_SMEM_BYTES.
#include "pa_bwd_simt.cuh"

#if !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_SMEM_BYTES)
#error "PA_BLOCK_M, PA_BLOCK_N and PA_SMEM_BYTES must be defined by the host"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;  // query rows per tile
constexpr int BN = PA_BLOCK_N;  // keys per block
constexpr int LD = PA_SIMT_LD;
constexpr int LDT = BM + 1;           // row of the P^T and dS^T tiles
constexpr int TPR = PA_THREADS / BN;  // threads per key row (dK, dV)
constexpr int KC = D / TPR;           // dK / dV columns per thread
constexpr int TPQ = PA_THREADS / BM;  // threads per query row (dQ)
constexpr int QC = D / TPQ;           // dQ columns per thread
static_assert(PA_THREADS % BN == 0 && D % TPR == 0 && PA_THREADS % BM == 0 && D % TPQ == 0, "bad simt tile");
// K, V, Q, dO tiles, P^T and dS^T, LSE and delta rows.
static_assert(PA_SMEM_BYTES == 4 * (2 * BN * LD + 2 * BM * LD + 2 * BN * LDT + 2 * BM),
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, 1) pa_flash_bwd_dkdv_simt(const PaBwdParams p) {
    extern __shared__ float4 pa_smem4[];
    float* k_s = reinterpret_cast<float*>(pa_smem4);
    float* v_s = k_s + BN * LD;
    float* q_s = v_s + BN * LD;
    float* do_s = q_s + BM * LD;
    float* p_s = do_s + BM * LD;
    float* ds_s = p_s + BN * LDT;
    float* lse_s = ds_s + BN * LDT;
    float* delta_s = lse_s + BM;

    const int b = blockIdx.x / p.num_n_blocks / p.heads_kv, h_kv = blockIdx.x / p.num_n_blocks % p.heads_kv;
    const int n0 = blockIdx.x % p.num_n_blocks * BN;
    const int group = p.heads_q / p.heads_kv;
    const PaSeq seq = pa_seq(p, b);
    if (n0 >= seq.seqlen_k) return;  // past the end of a shorter sequence
    const PaMask& mask = seq.mask;
    pa_simt_load_tile(k_s, static_cast<const float*>(p.k) + b * p.k_sb + h_kv * p.k_sh + (seq.k_start + n0) * p.k_sn,
                      p.k_sn, BN, seq.seqlen_k - n0);
    pa_simt_load_tile(v_s, static_cast<const float*>(p.v) + b * p.v_sb + h_kv * p.v_sh + (seq.k_start + n0) * p.v_sn,
                      p.v_sn, BN, seq.seqlen_k - n0);
    const int m_end = min(seq.seqlen_q, pa_mask_rows_end(mask, n0, BN));

    const int kr = threadIdx.x / TPR, kc = threadIdx.x % TPR;  // this thread's key row and first column
    const int qr = threadIdx.x / TPQ, qc = threadIdx.x % TPQ;  // ... query row and first column of dQ
    float dk[KC], dv[KC];
#pragma unroll
    for (int j = 0; j < KC; ++j) dk[j] = dv[j] = 0.f;

    for (int g = 0; g < group; ++g) {
        const int h = h_kv * group + g;
        const pa_i64 rows = pa_bwd_row0(p, seq, b, h);
        const PaMod mod = pa_seq_mod(p, seq, b, h);
        const float* q = static_cast<const float*>(p.q) + b * p.q_sb + h * p.q_sh + seq.q_start * p.q_sn;
        const float* dout = static_cast<const float*>(p.dout) + b * p.do_sb + h * p.do_sh + seq.q_start * p.do_sn;
        for (int m0 = pa_mask_first_row(mask, n0) / BM * BM; m0 < m_end; m0 += BM) {
            __syncthreads();  // every thread is done with the previous tile
            pa_simt_load_tile(q_s, q + (pa_i64)m0 * p.q_sn, p.q_sn, BM, seq.seqlen_q - m0);
            pa_simt_load_tile(do_s, dout + (pa_i64)m0 * p.do_sn, p.do_sn, BM, seq.seqlen_q - m0);
            pa_bwd_load_rows<BM>(lse_s, delta_s, p, rows, seq.seqlen_q, m0);
            __syncthreads();
            pa_bwd_simt_grads<true, BN, BM>(p_s, ds_s, k_s, q_s, v_s, do_s, lse_s, delta_s, mask, mod, p.scale_log2,
                                            p.scale, n0, m0, m0);
            __syncthreads();
#pragma unroll 2
            for (int m = 0; m < BM; ++m) {
                const float pm = p_s[kr * LDT + m], dsm = ds_s[kr * LDT + m];
#pragma unroll
                for (int j = 0; j < KC; ++j) {
                    dv[j] = fmaf(pm, do_s[m * LD + kc + TPR * j], dv[j]);
                    dk[j] = fmaf(dsm, q_s[m * LD + kc + TPR * j], dk[j]);
                }
            }
            if (p.dq_atomic && m0 + qr < seq.seqlen_q) {
                float dq[QC];
#pragma unroll
                for (int j = 0; j < QC; ++j) dq[j] = 0.f;
#pragma unroll 2
                for (int n = 0; n < BN; ++n) {
                    const float dsn = ds_s[n * LDT + qr];
#pragma unroll
                    for (int j = 0; j < QC; ++j) dq[j] = fmaf(dsn, k_s[n * LD + qc + TPQ * j], dq[j]);
                }
                float* row = p.dq_accum + (rows + m0 + qr) * D;
#pragma unroll
                for (int j = 0; j < QC; ++j) atomicAdd(row + qc + TPQ * j, dq[j]);
            }
        }
    }

    if (n0 + kr >= seq.seqlen_k) return;
    float* dk_row = static_cast<float*>(p.dk) + b * p.dk_sb + h_kv * p.dk_sh + (seq.k_start + n0 + kr) * p.dk_sn;
    float* dv_row = static_cast<float*>(p.dv) + b * p.dv_sb + h_kv * p.dv_sh + (seq.k_start + n0 + kr) * p.dv_sn;
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        dk_row[kc + TPR * j] = dk[j];
        dv_row[kc + TPR * j] = dv[j];
    }
}
