// Two softmax-style kernels share one reduction helper (a shuffle-down tree from 16). The second numbers 32-lane
// warps explicitly and would be rewritten with width 32; the first assumes a block of one 32-lane warp and
// broadcasts lane 0's value. Each kernel is decided with the helper on its own: the first is refused.
// expect: refuse wave32-tree-broadcast 16:9
// expect: refuse wave32-tree-broadcast 17:9
__device__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, offset));
    return v;
}

extern "C" __global__ void row_max_one_warp(const float* x, float* out, int cols) {
    const float* row = x + (long long)blockIdx.x * cols;
    float m = -1e30f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = warp_max(m);
    m = __shfl_sync(0xffffffff, m, 0);
    if (threadIdx.x == 0) out[blockIdx.x] = m;
}

extern "C" __global__ void row_max_warps(const float* x, float* out, int rows, int cols) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    float m = -1e30f;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, x[(long long)row * cols + c]);
    m = warp_max(m);
    if (lane == 0) out[row] = m;
}
