// A shuffle of a __half2 value: CUDA overloads the shuffles for 16-bit types, hiprtc (ROCm 5.2) does not.
// expect: refuse shfl-half 9:17
#include <cuda_fp16.h>

extern "C" __global__ void pair_sums(const __half2* x, __half2* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half2 v = x[i];
    __half2 w = __shfl_xor_sync(0xffffffff, v, 1);
    y[i] = __hadd2(v, w);
}
