// Decoding, second step with more than one key split: each output row is the sum of the splits' rows weighted by
// exp(LSE_split - LSE), LSE = log sum exp(LSE_split), in float32. A block has PA_THREADS / PA_ROW_LANES slots of
// PA_ROW_LANES lanes (each lane every PA_ROW_LANES-th element of a row); p.combine_groups consecutive slots share a
// row and take every combine_groups-th split each, merging them in one pass against a running largest LSE (so that
// a row with many splits keeps many loads in flight and waits on memory once per few splits), and their sums meet
// in shared memory. A block covers slots / combine_groups rows of the [B, Hq, Nq] rows.
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

// exp(x - m) for a running largest m; 0 where x is -inf (also when m is).
PA_DEVICE float pa_weight(float x, float m) { return x == pa_neg_inf() ? 0.f : pa_exp2((x - m) * PA_LOG2E); }
}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS) pa_flash_decode_combine(const PaDecodeParams p) {
    pa_wait_prior_grid();  // the attend kernel's partial rows
    pa_release_next_grid();
    __shared__ float sums_s[SLOTS][D];  // each slot's weighted sum, relative to its largest LSE
    __shared__ float max_s[SLOTS], total_s[SLOTS];
    __shared__ int bad_s[SLOTS];
    const int groups = p.combine_groups;  // a power of two dividing SLOTS (host)
    const int slot = threadIdx.x / RL, lane = threadIdx.x % RL;
    const int g = slot % groups, first = slot - g;
    const pa_i64 rows = (pa_i64)p.batch * p.heads_q * p.seqlen_q;
    const pa_i64 row_ = (pa_i64)blockIdx.x * (SLOTS / groups) + slot / groups;
    const pa_i64 row = row_ < rows ? row_ : rows - 1;  // every slot takes part in the barriers

    // This slot's splits, merged against its running largest LSE m; a split that saw bad indices (LSE NaN) makes
    // the row NaN.
    float m = pa_neg_inf(), total = 0.f, acc[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) acc[j] = 0.f;
    bool bad = false;
#pragma unroll 4
    for (int s = g; s < p.num_splits; s += groups) {
        const float l = p.lse_part[s * rows + row];
        const float* part = p.o_part + (s * rows + row) * D;
        float x[PER_LANE];
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) x[j] = part[lane + RL * j];
        bad |= l != l;
        if (l > m) {  // a new largest LSE: rescale what was summed
            const float c = pa_weight(m, l);
            total *= c;
#pragma unroll
            for (int j = 0; j < PER_LANE; ++j) acc[j] *= c;
            m = l;
        }
        const float w = pa_weight(l, m);
        total += w;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) acc[j] = fmaf(w, x[j], acc[j]);
    }
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) sums_s[slot][lane + RL * j] = acc[j];
    if (lane == 0) {
        max_s[slot] = m;
        total_s[slot] = total;
        bad_s[slot] = bad;
    }
    __syncthreads();
    if (g != 0 || row_ >= rows) return;
    float max_lse = m;
    for (int i = 1; i < groups; ++i) {
        max_lse = fmaxf(max_lse, max_s[first + i]);
        bad |= bad_s[first + i] != 0;
    }
    const float c0 = pa_weight(m, max_lse);
    total *= c0;
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) acc[j] *= c0;
    for (int i = 1; i < groups; ++i) {
        const float c = pa_weight(max_s[first + i], max_lse);
        total += c * total_s[first + i];
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) acc[j] = fmaf(c, sums_s[first + i][lane + RL * j], acc[j]);
    }
    // A row that saw no key in any split: zeros and LSE -inf; bad indices: NaN.
    const float nan = __int_as_float(0x7fc00000);
    const float inv = bad ? nan : (total > 0.f ? 1.f / total : 0.f);
    const int i = (int)(row % p.seqlen_q), h = (int)(row / p.seqlen_q % p.heads_q);
    const int b = (int)(row / p.seqlen_q / p.heads_q);
    pa_elem* o = static_cast<pa_elem*>(p.o) + b * p.o_sb + (pa_i64)i * p.o_sn + (pa_i64)h * p.o_sh;
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) pa_store_elem(o + lane + RL * j, acc[j] * inv);
    if (p.lse != nullptr && lane == 0)
        p.lse[row] = bad ? nan : (total > 0.f ? max_lse + pa_log2(total) * PA_LN2 : pa_neg_inf());
}
