// Exercises every cross-lane operation of the prelude, for the tests that compare the results with the lane
// semantics written down on the host (tests/test_gpu_lanes.py): native waves, the wave64 emulation, and (compiled
// only) HIP. Not used by attention.
//
// out[slot][thread], slots in this order: for width = 1, 2, ..., PA_WARP_SIZE: pa_shfl_xor with every lane mask
// 0..PA_WARP_SIZE-1, then pa_shfl from lane 5, from lane (7 * lane + 3), from lane (lane + 70); then
// pa_group_max<W> and pa_group_sum<W> for W = 1, 2, ..., PA_WARP_SIZE; then pa_wave_uniform of the wave's first x
// (the same in every lane). ballots[2 * thread + i] holds pa_ballot(x > 0) and pa_ballot(lane % 3 == 0).
#include "pa_prelude.cuh"

struct PaProbeParams {
    const float* x;
    float* out;
    pa_lanemask_t* ballots;
};

namespace {

// Fills the reduction slots from `slot` on; returns the slot after them.
template <int W>
PA_DEVICE int probe_reductions(float v, float* out, int slot, int stride) {
    out[slot * stride] = pa_group_max<W>(v);
    out[(slot + 1) * stride] = pa_group_sum<W>(v);
    if constexpr (W < PA_WARP_SIZE) return probe_reductions<W * 2>(v, out, slot + 2, stride);
    return slot + 2;
}

}  // namespace

extern "C" __global__ void pa_prelude_probe(const PaProbeParams p) {
    const int t = (int)threadIdx.x;
    const int stride = (int)blockDim.x;
    const int lane = pa_lane_id();
    const float v = p.x[t];
    float* out = p.out + t;
    int slot = 0;
    for (int width = 1; width <= PA_WARP_SIZE; width *= 2) {
        for (int m = 0; m < PA_WARP_SIZE; ++m) out[(slot++) * stride] = pa_shfl_xor(v, m, width);
        out[(slot++) * stride] = pa_shfl(v, 5, width);
        out[(slot++) * stride] = pa_shfl(v, 7 * lane + 3, width);
        out[(slot++) * stride] = pa_shfl(v, lane + 70, width);
    }
    slot = probe_reductions<1>(v, out, slot, stride);
    out[slot * stride] = (float)pa_wave_uniform((int)p.x[pa_wave_id() * PA_WARP_SIZE]);
    p.ballots[2 * t] = pa_ballot(v > 0.f);
    p.ballots[2 * t + 1] = pa_ballot(lane % 3 == 0);
}
