// "All lanes voted yes" tested against 0xffffffff: a 64-lane ballot is never equal to it when all 64 lanes vote.
// expect: refuse ballot-32bit-op 8:49
extern "C" __global__ void all_finite(const float* x, int* ok, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = i < n ? x[i] : 0.f;
    const bool finite = isfinite(v);
    const unsigned long long votes = __ballot_sync(0xffffffff, finite);
    if (threadIdx.x % warpSize == 0 && votes != 0xffffffffull) atomicAnd(ok, 0);
}
