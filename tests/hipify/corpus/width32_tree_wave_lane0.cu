// Every shuffle says width 32, but the sum of each 32-lane group is read at lane 0 of the wave (lane numbered
// with warpSize): on a 64-lane wave the second group's sum never reaches the atomic.
// expect: refuse wave32-tree-broadcast 9:9
extern "C" __global__ void sum_groups(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    float v = i < n ? x[i] : 0.f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset, 32);
    if (lane == 0) atomicAdd(out, v);
}
