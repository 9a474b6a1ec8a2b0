// Decoding, second step with more than one key split: each output row is the sum of the splits' rows weighted by
// exp(LSE_split - LSE), LSE = log sum exp(LSE_split), in float32. A block has PA_THREADS / PA_ROW_LANES slots of
// PA_ROW_LANES lanes (each lane every PA_ROW_LANES-th element of a row); p.combine_groups consecutive slots share a
// row and take every combine_groups-th split each, so that a row with many splits keeps many loads in flight, and
// their sums meet in shared memory. A block covers slots / combine_groups rows of the [B, Hq, Nq] rows.
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_THREADS, PA_ROW_LANES, PA_BF16, PA_F32.
#include "pa_decode_params.cuh"
#include "pa_prelude_elem.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_THREADS) || !defined(PA_ROW_LANES)
#error "PA_HEAD_DIM, PA_THREADS and PA_ROW_LANES must be defined by the host"
#endif

namespace {
constexpr int D = PA_HEAD_DIM;
constexpr int RL = PA_ROW_LANES;
constexpr int SLOTS = PA_THREADS / RL;
constexpr int PER_LANE = D / RL;
static_assert(D % RL == 0 && PA_THREADS % RL == 0 && RL <= PA_WARP_SIZE, "bad PA_ROW_LANES");
}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS) pa_flash_decode_combine(const PaDecodeParams p) {
    __shared__ float sums_s[SLOTS][D];  // each slot's weighted sum
    __shared__ float slot_s[SLOTS];     // each slot's largest LSE, then its total weight
    __shared__ int bad_s[SLOTS];
    const int groups = p.combine_groups;  // a power of two dividing SLOTS (host)
    const int slot = threadIdx.x / RL, lane = threadIdx.x % RL;
    const int g = slot % groups, first = slot - g;
    const pa_i64 rows = (pa_i64)p.batch * p.heads_q * p.seqlen_q;
    const pa_i64 row_ = (pa_i64)blockIdx.x * (SLOTS / groups) + slot / groups;
    const pa_i64 row = row_ < rows ? row_ : rows - 1;  // every lane takes part in the reductions

    // The row's largest LSE over its slots' lanes; a split that saw bad indices (LSE NaN) makes the row NaN.
    float max_lse = pa_neg_inf();
    bool bad = false;
    for (int s = g * RL + lane; s < p.num_splits; s += groups * RL) {
        const float l = p.lse_part[s * rows + row];
        bad |= l != l;
        max_lse = fmaxf(max_lse, l);
    }
    max_lse = pa_group_max<RL>(max_lse);
    bad = pa_group_max<RL>(bad ? 1.f : 0.f) > 0.f;
    if (lane == 0) {
        slot_s[slot] = max_lse;
        bad_s[slot] = bad;
    }
    __syncthreads();
    for (int i = 0; i < groups; ++i) {
        max_lse = fmaxf(max_lse, slot_s[first + i]);
        bad |= bad_s[first + i] != 0;
    }
    if (bad) max_lse = __int_as_float(0x7fc00000);

    float acc[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) acc[j] = 0.f;
    float total = 0.f;
    if (max_lse != pa_neg_inf() && max_lse == max_lse) {
#pragma unroll 4
        for (int s = g; s < p.num_splits; s += groups) {
            const float w = pa_exp2((p.lse_part[s * rows + row] - max_lse) * PA_LOG2E);
            total += w;
            const float* part = p.o_part + (s * rows + row) * D;
#pragma unroll
            for (int j = 0; j < PER_LANE; ++j) acc[j] = fmaf(w, part[lane + RL * j], acc[j]);
        }
    }
    __syncthreads();  // every slot has read slot_s
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) sums_s[slot][lane + RL * j] = acc[j];
    if (lane == 0) slot_s[slot] = total;
    __syncthreads();
    if (g != 0 || row_ >= rows) return;
    for (int i = 1; i < groups; ++i) {
        total += slot_s[first + i];
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) acc[j] += sums_s[first + i][lane + RL * j];
    }
    // A row that saw no key in any split: zeros and LSE -inf; NaN (bad indices) stays NaN.
    const float inv = max_lse == max_lse ? (total > 0.f ? 1.f / total : 0.f) : max_lse;
    const int i = (int)(row % p.seqlen_q), h = (int)(row / p.seqlen_q % p.heads_q);
    const int b = (int)(row / p.seqlen_q / p.heads_q);
    pa_elem* o = static_cast<pa_elem*>(p.o) + b * p.o_sb + (pa_i64)i * p.o_sn + (pa_i64)h * p.o_sh;
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) pa_store_elem(o + lane + RL * j, acc[j] * inv);
    if (p.lse != nullptr && lane == 0)
        p.lse[row] = total > 0.f && max_lse == max_lse ? max_lse + pa_log2(total) * PA_LN2 : max_lse;
}
