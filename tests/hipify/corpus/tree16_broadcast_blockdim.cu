// A one-warp-per-block dot product: each thread loops over blockDim.x, a shuffle-down tree starting at 16 reduces,
// and lane 0's value is broadcast. No literal 32 anywhere, but the tree only combines 32 lanes: launched with one
// 64-lane wave per block, the total misses lanes 32-63. Refused at the broadcast and at the thread-0 read.
// expect: refuse wave32-tree-broadcast 10:9
// expect: refuse wave32-tree-broadcast 11:9
extern "C" __global__ void dot(const float* a, const float* b, float* out, int n) {
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += a[i] * b[i];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    s = __shfl_sync(0xffffffffu, s, 0);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
