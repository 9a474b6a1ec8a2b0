// Lanes are numbered with warpSize, but the reduction tree starts at 16: lane 0 of a 64-lane wave only holds the
// sum of lanes 0-31, and lanes 32-63 never reach the atomic.
// expect: refuse wave32-tree-broadcast 9:9
extern "C" __global__ void sum_atomic(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    float v = i < n ? x[i] : 0.f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    if (lane == 0) atomicAdd(out, v);
}
