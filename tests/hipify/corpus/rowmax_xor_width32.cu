// One 32-lane group per matrix row: an xor butterfly with an explicit width of 32. The width says which lanes form
// a group, so a 64-lane wave holds two rows, as two CUDA warps would.
// expect: translate
__device__ float group_max(float v) {
    for (int mask = 16; mask >= 1; mask /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, mask, 32));
    return v;
}

extern "C" __global__ void row_max(const float* x, float* out, int rows, int cols) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    float m = -1e30f;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, x[(long long)row * cols + c]);
    m = group_max(m);
    if (lane == 0) out[row] = m;
}
