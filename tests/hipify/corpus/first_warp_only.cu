// The second stage of a block reduction runs on `threadIdx.x < 32` (the first warp) but reduces with warpSize:
// on a 64-lane wave, lanes 32-63 of the first wave are inactive while the shuffles read them.
// expect: refuse lane-constant-mixed 17:23
__device__ float wave_sum(float v) {
    for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

extern "C" __global__ void block_total(const float* x, float* out, int n) {
    __shared__ float partial[32];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    const int warp = threadIdx.x / warpSize;
    float v = wave_sum(i < n ? x[i] : 0.f);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / warpSize ? partial[threadIdx.x] : 0.f;
        v = wave_sum(v);
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
}
