// Grid-stride sum with a warp reduction written the portable way: offsets start at warpSize / 2 and lane 0 of
// each warp (lane numbered modulo warpSize) adds the warp's sum. Nothing depends on 32 lanes.
// expect: translate
__device__ float warp_sum(float v) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

extern "C" __global__ void sum_kernel(const float* x, float* out, int n) {
    float v = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
    v = warp_sum(v);
    if (threadIdx.x % warpSize == 0) atomicAdd(out, v);
}
