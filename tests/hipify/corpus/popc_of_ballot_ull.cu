// The ballot is kept in 64 bits, but __popc counts only its low 32 bits.
// expect: refuse ballot-32bit-op 7:55
extern "C" __global__ void count_set64(const int* x, int* count, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const bool p = i < n && x[i] > 0;
    unsigned long long m = __ballot_sync(0xffffffffu, p);
    if (threadIdx.x % warpSize == 0) atomicAdd(count, __popc(m));
}
