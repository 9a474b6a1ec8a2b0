// Code written for 32-lane groups (lane = tid % 32) uses __any_sync: on a 64-lane wave the vote covers two groups,
// so one group can follow the other's decision.
// expect: refuse vote-in-32-lane-groups 9:9
extern "C" __global__ void group_flags(const float* x, int* flags, float threshold, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32;
    const int group = i / 32;
    const float v = i < n ? x[i] : 0.f;
    if (__any_sync(0xffffffff, v > threshold)) {
        if (lane == 0) flags[group] = 1;
    }
}
