// FlashAttention backward, first step: delta = rowsum(dO * O) in float32 for every query row, the row's LSE in log2
// units (+inf where the forward saw no key, so that its probabilities are 0), and (with p.dq_atomic) the row of
// dq_accum that the dK/dV kernel adds into, zeroed. PA_ROW_LANES lanes share a row, each
// reading every PA_ROW_LANES-th element (adjacent lanes read adjacent elements); a block covers
// PA_THREADS / PA_ROW_LANES rows.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_THREADS, PA_ROW_LANES, PA_BF16, PA_F32.
#include "pa_bwd_params.cuh"
#include "pa_prelude_elem.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_THREADS) || !defined(PA_ROW_LANES)
#error "PA_HEAD_DIM, PA_THREADS and PA_ROW_LANES must be defined by the host"
#endif

namespace {
constexpr int D = PA_HEAD_DIM;
constexpr int RL = PA_ROW_LANES;
static_assert(D % RL == 0 && PA_THREADS % RL == 0 && RL <= PA_WARP_SIZE, "bad PA_ROW_LANES");
}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS) pa_flash_bwd_prep(const PaBwdParams p) {
    const pa_i64 row = (pa_i64)blockIdx.x * (PA_THREADS / RL) + threadIdx.x / RL;
    const int lane = threadIdx.x % RL;
    // The row arrays: [B, Hq, total_q], or [1, Hq, total_q] for packed sequences (rows of q are then tokens).
    const pa_i64 rows = (pa_i64)(p.cu_seqlens_q != nullptr ? 1 : p.batch) * p.heads_q * p.total_q;
    // Every lane of a row group takes part in the reduction, also past the last row.
    const pa_i64 r = row < rows ? row : rows - 1;
    const int i = (int)(r % p.total_q);
    const pa_i64 bh = r / p.total_q;
    const int b = (int)(bh / p.heads_q), h = (int)(bh % p.heads_q);
    const pa_elem* o = static_cast<const pa_elem*>(p.o) + b * p.o_sb + h * p.o_sh + i * p.o_sn;
    const pa_elem* dout = static_cast<const pa_elem*>(p.dout) + b * p.do_sb + h * p.do_sh + i * p.do_sn;
    float sum = 0.f;
#pragma unroll
    for (int c = lane; c < D; c += RL) sum += pa_elem_to_float(o[c]) * pa_elem_to_float(dout[c]);
    sum = pa_group_sum<RL>(sum);
    if (row >= rows) return;
    if (lane == 0) {
        p.delta[r] = sum;
        const float lse = p.lse[r];
        p.lse_log2[r] = lse == pa_neg_inf() ? -pa_neg_inf() : lse * PA_LOG2E;
    }
    if (p.dq_atomic) {
#pragma unroll
        for (int c = lane; c < D; c += RL) p.dq_accum[r * D + c] = 0.f;
    }
}
