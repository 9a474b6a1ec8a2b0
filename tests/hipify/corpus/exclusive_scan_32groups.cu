// Exclusive scan per 32-lane warp (lane = tid & 31): shuffle-up steps while the offset is below 32, the warp total
// from lane 31, and a shift by one lane. Width 32 is added to each shuffle.
// expect: rewrite add-width-32 12:23
// expect: rewrite add-width-32 15:23
// expect: rewrite add-width-32 16:16
extern "C" __global__ void warp_exclusive_scan(const int* in, int* out, int* totals, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    const int v = i < n ? in[i] : 0;
    int incl = v;
    for (int d = 1; d < 32; d <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += t;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    int excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) excl = 0;
    if (i < n) out[i] = excl;
    if (lane == 0 && i < n) totals[i / 32] = total;
}
