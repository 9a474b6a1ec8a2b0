// Lanes numbered with warpSize but warps with a literal 32: on a 64-lane wave lane 0 of each wave writes into the
// slot of an odd "warp" number, and half of the slots stay unwritten.
// expect: refuse lane-constant-mixed 12:36
__device__ float wave_sum(float v) {
    for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

extern "C" __global__ void partial_sums(const float* x, float* partial, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    const int warp = threadIdx.x / 32;
    const float v = wave_sum(i < n ? x[i] : 0.f);
    if (lane == 0) partial[blockIdx.x * (blockDim.x / warpSize) + warp] = v;
}
