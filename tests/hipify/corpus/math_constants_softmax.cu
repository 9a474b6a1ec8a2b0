// Row softmax with one warp per row, using CUDA's math constants (CUDART_INF_F, CUDART_L2E_F) from
// <math_constants.h>; the reductions use warpSize.
// expect: translate
#include <math_constants.h>

__device__ float warp_max(float v) {
    for (int o = warpSize / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

__device__ float warp_sum(float v) {
    for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    const int lane = threadIdx.x % warpSize;
    const int row = blockIdx.x * (blockDim.x / warpSize) + threadIdx.x / warpSize;
    if (row >= rows) return;
    const float* xr = x + (long long)row * cols;
    float m = -CUDART_INF_F;
    for (int c = lane; c < cols; c += warpSize) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.f;
    for (int c = lane; c < cols; c += warpSize) s += exp2f((xr[c] - m) * CUDART_L2E_F);
    s = warp_sum(s);
    for (int c = lane; c < cols; c += warpSize) y[(long long)row * cols + c] = exp2f((xr[c] - m) * CUDART_L2E_F) / s;
}
