// A user's own helpers whose names start with `cuda`: the cudaCheck macro and the cudaCheckIndex function are
// defined here, so they are the user's names, not CUDA runtime names. __trap becomes __builtin_trap.
// expect: translate
#define cudaCheck(cond)          \
    do {                         \
        if (!(cond)) __trap();   \
    } while (0)

__device__ bool cudaCheckIndex(int i, int n) { return i >= 0 && i < n; }

extern "C" __global__ void gather(const float* src, const int* idx, float* dst, int n, int m) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int j = idx[i];
    cudaCheck(cudaCheckIndex(j, m));
    dst[i] = src[j];
}
