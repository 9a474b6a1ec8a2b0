// Warp-level inclusive scan with shuffle-up steps while the offset is below warpSize; the warp total comes from
// lane warpSize - 1.
// expect: translate
extern "C" __global__ void warp_scan(const int* in, int* out, int* totals, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    int v = i < n ? in[i] : 0;
    for (int d = 1; d < warpSize; d *= 2) {
        const int t = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += t;
    }
    if (i < n) out[i] = v;
    const int total = __shfl_sync(0xffffffffu, v, warpSize - 1);
    if (lane == 0) totals[i / warpSize] = total;
}
