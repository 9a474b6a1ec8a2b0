// Warp-aggregated atomic: the active lanes elect the lowest one as leader, which adds the count for all of them.
// The active mask stays in 64 bits (__ffsll, __popcll), lanes are numbered with warpSize.
// expect: translate
extern "C" __global__ void append_positive(const float* x, float* out, int* size, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || x[i] <= 0.f) return;
    const unsigned long long active = __activemask();
    const int lane = threadIdx.x % warpSize;
    const int leader = __ffsll((long long)active) - 1;
    const unsigned long long below = active & ((1ull << lane) - 1ull);
    int base = 0;
    if (lane == leader) base = atomicAdd(size, __popcll(active));
    base = __shfl_sync(active, base, leader);
    out[base + __popcll(below)] = x[i];
}
