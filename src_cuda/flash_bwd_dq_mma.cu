// FlashAttention backward on the matrix units, per block of queries: dQ for PA_BLOCK_M query rows of one
// (batch, head), summed over the key tiles in a fixed order (the deterministic path; the dK/dV kernel then runs
// without its dQ atomics). Like the forward, the waves own the query rows; per key tile of PA_BLOCK_N keys:
//   S = Q K^T, dP = dO V^T                         (pa_tile_qk)
//   P = exp2(S scale log2(e) - LSE), dS = scale P (dP - delta)                      (pa_bwd.cuh)
//   dQ += dS K                                     (pa_tile_pv, K read as the right operand)
// PA_SPLIT > 1 gives each block 1 / PA_SPLIT of the head dim's columns of dQ.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_BLOCK_M, PA_BLOCK_N, PA_THREADS, PA_SPLIT, PA_MIN_BLOCKS,
// PA_SMEM_BYTES, PA_BF16, PA_F32.
#include "pa_bwd.cuh"

#if !defined(PA_BLOCK_M) || !defined(PA_BLOCK_N) || !defined(PA_SPLIT) || !defined(PA_MIN_BLOCKS) || \
    !defined(PA_SMEM_BYTES)
#error "PA_BLOCK_M, PA_BLOCK_N, PA_SPLIT, PA_MIN_BLOCKS and PA_SMEM_BYTES must be defined by the host"
#endif
#if PA_MMA_WGMMA
#error "the backward kernels run on the synchronous tile products"
#endif

namespace {

constexpr int D = PA_HEAD_DIM;
constexpr int BM = PA_BLOCK_M;  // query rows per block
constexpr int BN = PA_BLOCK_N;  // keys per tile
constexpr int WAVES = PA_THREADS / PA_WARP_SIZE;
constexpr int MT = BM / (WAVES * PA_MMA_M);  // query row tiles per wave
constexpr int SN = BN / PA_MMA_N;            // score column tiles (keys)
constexpr int DC = D / PA_SPLIT;             // head-dim columns of this block's dQ
constexpr int OC = DC / PA_MMA_N;

static_assert(PA_THREADS % PA_WARP_SIZE == 0 && MT >= 1 && BM == WAVES * PA_MMA_M * MT, "bad PA_BLOCK_M / PA_THREADS");
static_assert(SN % PA_MMA_B_TILES == 0 && BN % PA_MMA_K == 0, "unsupported PA_BLOCK_N");
static_assert(D % PA_SPLIT == 0 && DC % (PA_MMA_N * PA_MMA_B_TILES) == 0 && D % PA_MMA_K == 0, "bad PA_SPLIT");
// Q, dO, K and V tiles, LSE and delta rows.
constexpr int SMEM = (int)sizeof(pa_elem) * (2 * pa_tile_elems<BM>() + 2 * pa_tile_elems<BN>()) + 8 * BM;
static_assert(PA_SMEM_BYTES == SMEM,
              "the host's shared-memory size (PA_SMEM_BYTES) does not match this kernel's tiles");

}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS, PA_MIN_BLOCKS) pa_flash_bwd_dq_mma(const PaBwdParams p) {
    extern __shared__ float4 pa_smem4[];
    pa_elem* q_s = reinterpret_cast<pa_elem*>(pa_smem4);
    pa_elem* do_s = q_s + pa_tile_elems<BM>();
    pa_elem* k_s = do_s + pa_tile_elems<BM>();
    pa_elem* v_s = k_s + pa_tile_elems<BN>();
    float* lse_s = reinterpret_cast<float*>(v_s + pa_tile_elems<BN>());
    float* delta_s = lse_s + BM;

    // Block x: query block m of (batch, head) bh, column slice c.
    const int per_head = p.num_m_blocks * PA_SPLIT;
    const int m_block = blockIdx.x % per_head / PA_SPLIT, c0 = blockIdx.x % PA_SPLIT * DC;
    const int b = blockIdx.x / per_head / p.heads_q, h = blockIdx.x / per_head % p.heads_q;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int m0 = m_block * BM;
    const PaSeq seq = pa_seq(p, b);
    if (m0 >= seq.seqlen_q) return;  // past the end of a shorter sequence
    const PaMask& mask = seq.mask;
    const PaMod mod = pa_seq_mod(p, seq, b, h);

    const PaTileLoader<BM> q_loader;
    q_loader.start(q_s, static_cast<const pa_elem*>(p.q) + b * p.q_sb + h * p.q_sh + (seq.q_start + m0) * p.q_sn,
                   p.q_sn, seq.seqlen_q - m0);
    q_loader.start(do_s, static_cast<const pa_elem*>(p.dout) + b * p.do_sb + h * p.do_sh + (seq.q_start + m0) * p.do_sn,
                   p.do_sn, seq.seqlen_q - m0);
    pa_async_commit();
    pa_bwd_load_rows<BM>(lse_s, delta_s, p, pa_bwd_row0(p, seq, b, h), seq.seqlen_q, m0);

    pa_mma_c dq[MT][OC];
    pa_mma_c_zero(dq);

    const pa_elem* k = static_cast<const pa_elem*>(p.k) + b * p.k_sb + h_kv * p.k_sh + seq.k_start * p.k_sn;
    const pa_elem* v = static_cast<const pa_elem*>(p.v) + b * p.v_sb + h_kv * p.v_sh + seq.k_start * p.v_sn;
    const PaTileLoader<BN> kv_loader;
    const int n_end = pa_mask_rows_key_end(mask, m0, BM);
    for (int n0 = pa_mask_rows_key_begin(mask, m0) / BN * BN; n0 < n_end; n0 += BN) {
        __syncthreads();  // every wave is done with the previous K and V
        kv_loader.start(k_s, k + (pa_i64)n0 * p.k_sn, p.k_sn, seq.seqlen_k - n0);
        kv_loader.start(v_s, v + (pa_i64)n0 * p.v_sn, p.v_sn, seq.seqlen_k - n0);
        pa_async_commit();
        pa_async_wait<0>();
        __syncthreads();

        pa_mma_c s[MT][SN], ds[MT][SN];
        pa_tile_qk<MT, SN, BM, BN>(s, q_s, k_s);
        pa_tile_qk<MT, SN, BM, BN>(ds, do_s, v_s);
        pa_bwd_grads<false>(s, ds, lse_s, delta_s, mask, mod, p.scale_log2, p.scale, m0, n0, m0,
                            pa_mask_tile_partial(mask, m0, BM, n0, BN));
        pa_tile_pv<MT, OC, BN, SN>(dq, ds, k_s + c0);
    }
    pa_async_wait<0>();  // Q and dO of a block that sees no key

    pa_elem* dq_out = static_cast<pa_elem*>(p.dq) + b * p.dq_sb + h * p.dq_sh + seq.q_start * p.dq_sn + c0;
    pa_bwd_store_rows(dq, dq_out + (pa_i64)m0 * p.dq_sn, p.dq_sn, 0, seq.seqlen_q - m0, 1.f);
}
