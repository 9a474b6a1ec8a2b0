// Count matching elements per warp with a ballot kept in 64 bits and counted with __popcll: on a 64-lane wave the
// ballot has 64 bits and all of them are counted.
// expect: translate
extern "C" __global__ void count_positive(const float* x, unsigned long long* count, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    const bool pred = i < n && x[i] > 0.f;
    unsigned long long ballot = __ballot_sync(0xffffffff, pred);
    if (lane == 0) atomicAdd(count, (unsigned long long)__popcll(ballot));
}
