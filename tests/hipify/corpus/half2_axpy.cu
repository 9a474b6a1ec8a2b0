// y = a * x + y on packed half pairs, with the <cuda_fp16.h> intrinsics that HIP provides too.
// expect: translate
#include <cuda_fp16.h>

extern "C" __global__ void haxpy(int n2, float a, const __half2* x, __half2* y) {
    const __half2 a2 = __float2half2_rn(a);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += blockDim.x * gridDim.x) {
        y[i] = __hfma2(a2, x[i], y[i]);
    }
}

extern "C" __global__ void half2_to_float(int n2, const __half2* x, float* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n2) {
        const float2 f = __half22float2(x[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = __half2float(__hmul(__low2half(x[i]), __high2half(x[i]))) + f.y;
    }
}
