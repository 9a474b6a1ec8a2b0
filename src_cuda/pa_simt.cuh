// portattn SIMT float32 tiles (no matrix units), shared by the simt kernels of every family: rows of PA_HEAD_DIM
// floats in shared memory, padded by 4 floats (PA_SIMT_LD), filled with 16-byte loads by the whole block.
//   pa_simt_load_tile(tile, src, stride, rows, valid)    rows at or past `valid` become zeros
//   pa_simt_dot(a, b)                                    the dot product of two shared rows
#pragma once

#include "pa_prelude.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_THREADS)
#error "PA_HEAD_DIM and PA_THREADS must be defined by the host"
#endif

constexpr int PA_SIMT_LD = PA_HEAD_DIM + 4;  // padded row (floats)

PA_DEVICE void pa_simt_load_tile(float* tile, const float* src, pa_i64 stride, int rows, int valid) {
    constexpr int V4 = PA_HEAD_DIM / 4;
    for (int idx = threadIdx.x; idx < rows * V4; idx += PA_THREADS) {
        const int r = idx / V4;
        const int c = (idx % V4) * 4;
        const float4 val = r < valid ? pa_load4(src + (pa_i64)r * stride + c) : pa_zero4();
        pa_store4(tile + r * PA_SIMT_LD + c, val);
    }
}

PA_DEVICE float pa_simt_dot(const float* a, const float* b) {
    float acc = 0.f;
#pragma unroll 4
    for (int c = 0; c < PA_HEAD_DIM; c += 4) {
        const float4 x = pa_load4(a + c), y = pa_load4(b + c);
        acc += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
    }
    return acc;
}
