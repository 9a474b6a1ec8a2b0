// FlashAttention backward, float32 on SIMT lanes: dQ for PA_BLOCK_M query rows of one (batch, head), summed over the
// key tiles in a fixed order (the deterministic path). The portable fallback of flash_bwd_dq_mma.cu.
//
// Per key tile of PA_BLOCK_N keys: P and dS (pa_bwd_simt.cuh) go to shared memory; each thread owns one query row's
// slice of dQ (every TPQ-th column) and adds dS K into registers.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_SMEM_BYTES.
#include "pa_bwd_simt.cuh"

#if !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_SMEM_BYTES)
#error "PA_BLOCK_M, PA_BLOCK_N and PA_SMEM_BYTES must be defined by the host"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;  // query rows per block
constexpr int BN = PA_BLOCK_N;  // keys per tile
constexpr int LD = PA_SIMT_LD;
constexpr int LDT = BN + 1;           // row of the P and dS tiles
constexpr int TPQ = PA_THREADS / BM;  // threads per query row
constexpr int QC = D / TPQ;           // dQ columns per thread
static_assert(PA_THREADS % BM == 0 && D % TPQ == 0, "bad simt tile");
// Q, dO, K, V tiles, P and dS, LSE and delta rows.
static_assert(PA_SMEM_BYTES == 4 * (2 * BM * LD + 2 * BN * LD + 2 * BM * LDT + 2 * BM),
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, 1) pa_flash_bwd_dq_simt(const PaBwdParams p) {
    extern __shared__ float4 pa_smem4[];
    float* q_s = reinterpret_cast<float*>(pa_smem4);
    float* do_s = q_s + BM * LD;
    float* k_s = do_s + BM * LD;
    float* v_s = k_s + BN * LD;
    float* p_s = v_s + BN * LD;
    float* ds_s = p_s + BM * LDT;
    float* lse_s = ds_s + BM * LDT;
    float* delta_s = lse_s + BM;

    const int b = blockIdx.x / p.num_m_blocks / p.heads_q, h = blockIdx.x / p.num_m_blocks % p.heads_q;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int m0 = blockIdx.x % p.num_m_blocks * BM;
    const PaSeq seq = pa_seq(p, b);
    if (m0 >= seq.seqlen_q) return;  // past the end of a shorter sequence
    const PaMask& mask = seq.mask;
    const PaMod mod = pa_seq_mod(p, seq, b, h);
    pa_simt_load_tile(q_s, static_cast<const float*>(p.q) + b * p.q_sb + h * p.q_sh + (seq.q_start + m0) * p.q_sn,
                      p.q_sn, BM, seq.seqlen_q - m0);
    pa_simt_load_tile(do_s,
                      static_cast<const float*>(p.dout) + b * p.do_sb + h * p.do_sh + (seq.q_start + m0) * p.do_sn,
                      p.do_sn, BM, seq.seqlen_q - m0);
    pa_bwd_load_rows<BM>(lse_s, delta_s, p, pa_bwd_row0(p, seq, b, h), seq.seqlen_q, m0);

    const int qr = threadIdx.x / TPQ, qc = threadIdx.x % TPQ;
    float dq[QC];
#pragma unroll
    for (int j = 0; j < QC; ++j) dq[j] = 0.f;
    const float* k = static_cast<const float*>(p.k) + b * p.k_sb + h_kv * p.k_sh + seq.k_start * p.k_sn;
    const float* v = static_cast<const float*>(p.v) + b * p.v_sb + h_kv * p.v_sh + seq.k_start * p.v_sn;
    const int n_end = pa_mask_rows_key_end(mask, m0, BM);
    for (int n0 = pa_mask_rows_key_begin(mask, m0) / BN * BN; n0 < n_end; n0 += BN) {
        __syncthreads();  // every thread is done with the previous K, V, P and dS
        pa_simt_load_tile(k_s, k + (pa_i64)n0 * p.k_sn, p.k_sn, BN, seq.seqlen_k - n0);
        pa_simt_load_tile(v_s, v + (pa_i64)n0 * p.v_sn, p.v_sn, BN, seq.seqlen_k - n0);
        __syncthreads();
        pa_bwd_simt_grads<false, BM, BN>(p_s, ds_s, q_s, k_s, do_s, v_s, lse_s, delta_s, mask, mod, p.scale_log2,
                                         p.scale, m0, n0, m0);
        __syncthreads();
#pragma unroll 2
        for (int n = 0; n < BN; ++n) {
            const float dsn = ds_s[qr * LDT + n];
#pragma unroll
            for (int j = 0; j < QC; ++j) dq[j] = fmaf(dsn, k_s[n * LD + qc + TPQ * j], dq[j]);
        }
    }

    if (m0 + qr >= seq.seqlen_q) return;
    float* row = static_cast<float*>(p.dq) + b * p.dq_sb + h * p.dq_sh + (seq.q_start + m0 + qr) * p.dq_sn;
#pragma unroll
    for (int j = 0; j < QC; ++j) row[qc + TPQ * j] = dq[j];
}
