// Code written for 32-lane groups (lane = tid & 31, group = tid >> 5) whose only shuffles are xor butterflies
// below 32: on a 64-lane wave they stay inside their aligned 32-lane half, so each half still sees its own sum.
// expect: translate
extern "C" __global__ void group_mean(const float* x, float* out, int n) {
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = tid & 31;
    const int group = tid >> 5;
    float v = tid < n ? x[tid] : 0.f;
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffff, v, m);
    if (lane == 0) out[group] = v / 32.f;
}
