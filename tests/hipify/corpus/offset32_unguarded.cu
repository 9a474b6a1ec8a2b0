// A reduction that starts at offset 32 without a width: on a 32-lane warp the first step reads the lane's own value
// (and doubles it), on a 64-lane wave it reads the other half. The two disagree, so it is refused.
// expect: refuse shfl-offset-range 5:18
__device__ float wave_sum(float v) {
    for (int m = 32; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffff, v, m);
    return v;
}

extern "C" __global__ void sums(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = wave_sum(i < n ? x[i] : 0.f);
    if (threadIdx.x % warpSize == 0) atomicAdd(out, v);
}
