// A ballot kept in a uint32_t and counted with __popc: both keep only lanes 0-31 of a 64-lane wave.
// expect: refuse ballot-32bit-store 9:18
// expect: refuse ballot-32bit-op 10:55
typedef unsigned int uint32_t;

extern "C" __global__ void count_set(const int* x, int* count, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const bool p = i < n && x[i] > 0;
    uint32_t m = __ballot_sync(0xffffffffu, p);
    if (threadIdx.x % warpSize == 0) atomicAdd(count, __popc(m));
}
