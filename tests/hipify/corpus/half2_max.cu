// __hmax2 has no counterpart in hiprtc (ROCm 5.2); the rule table refuses it with a hint.
// expect: refuse hmax2 7:23
#include <cuda_fp16.h>

extern "C" __global__ void relu2(__half2* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __hmax2(x[i], __float2half2_rn(0.f));
}
