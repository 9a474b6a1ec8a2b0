// An xor butterfly from 16 (32 lanes), then thread 0 writes the block's result: the kernel loops over blockDim.x,
// so a block is meant to be one warp, and on a 64-lane wave thread 0 holds only half of it.
// expect: refuse wave32-tree-broadcast 13:9
__device__ float warp_all_sum(float v) {
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffff, v, m);
    return v;
}

extern "C" __global__ void row_sums(const float* x, float* out, int cols) {
    float v = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) v += x[blockIdx.x * cols + c];
    v = warp_all_sum(v);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}
