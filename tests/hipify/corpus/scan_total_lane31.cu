// A warp scan written half for 32 lanes: the steps stop below 32 while lanes are numbered with warpSize (lanes
// 32-63 would scan only 32-lane windows), and the total is read from lane 31, the middle of a 64-lane wave.
// expect: refuse lane-constant-mixed 8:25
// expect: refuse wave32-last-lane 12:25
extern "C" __global__ void scan_totals(const float* x, float* totals, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.f;
    for (int d = 1; d < 32; d *= 2) {
        const float t = __shfl_up_sync(0xffffffff, v, d);
        if (threadIdx.x % warpSize >= d) v += t;
    }
    const float total = __shfl_sync(0xffffffff, v, 31);
    if (threadIdx.x % warpSize == 0) totals[i / warpSize] = total;
}
