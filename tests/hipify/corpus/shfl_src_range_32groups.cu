// 32-lane-group code (lane = tid % 32) that reads lane + 1 without reducing it: CUDA wraps the source lane into
// the 32-lane warp, HIP with width 32 would read lane 32 of the other half. Refused instead of rewritten.
// expect: refuse shfl-src-range 8:21
extern "C" __global__ void next_lane(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32;
    const float v = i < n ? in[i] : 0.f;
    const float w = __shfl_sync(0xffffffff, v, lane + 1);
    if (i < n && lane < 31) out[i] = w - v;
}
