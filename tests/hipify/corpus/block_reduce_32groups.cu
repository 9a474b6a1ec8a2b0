// A block reduction written for 32-lane warps: lane = tid % 32, warp = tid / 32, a shuffle-down tree from 16 and a
// broadcast from lane 0, all without a width. The code numbers its own 32-lane groups consistently, so width 32 is
// added to each shuffle: every aligned half of a 64-lane wave then acts exactly as a CUDA warp.
// expect: rewrite add-width-32 13:57
// expect: rewrite add-width-32 18:61
// expect: rewrite add-width-32 21:9
extern "C" __global__ void block_sum(const float* in, float* out, int n) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    float v = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += in[i];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? partial[lane] : 0.f;
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
        if (lane == 0) out[blockIdx.x] = v;
    }
    v = __shfl_sync(0xffffffff, v, 0);
}
