// A reduction that adds the offset-32 step only when the wave has more than 32 lanes: on NVIDIA the step never
// runs, on a 64-lane wave it combines the two halves. Written for both, translated as it is.
// expect: translate
__device__ float wave_sum(float v) {
    if (warpSize > 32) v += __shfl_xor_sync(0xffffffff, v, 32);
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffff, v, m);
    return v;
}

extern "C" __global__ void sums(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = wave_sum(i < n ? x[i] : 0.f);
    if (threadIdx.x % warpSize == 0) atomicAdd(out, v);
}
