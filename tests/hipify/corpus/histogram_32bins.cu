// A 32-bin histogram of the low five bits: `bins[32]`, `& 31` and `threadIdx.x < 32` count bins, not lanes, and
// the kernel has no cross-lane operation.
// expect: translate
extern "C" __global__ void low_bits_histogram(const unsigned int* keys, unsigned int* hist, int n) {
    __shared__ unsigned int bins[32];
    if (threadIdx.x < 32) bins[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&bins[keys[i] & 31], 1u);
    __syncthreads();
    if (threadIdx.x < 32) atomicAdd(&hist[threadIdx.x], bins[threadIdx.x]);
}
