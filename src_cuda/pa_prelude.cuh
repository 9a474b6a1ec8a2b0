// portattn vendor prelude: the only place in the device code that knows which vendor and lane count it is
// built for. Kernel bodies use the pa_* names below and never a literal lane count or lane mask.
//
// Defined by the host at compile time:
//   PA_WARP_SIZE   lanes per wave (32 on NVIDIA and RDNA wave32, 64 on CDNA).
#pragma once

#ifndef PA_WARP_SIZE
#error "PA_WARP_SIZE must be defined by the host (-DPA_WARP_SIZE=32 or 64)"
#endif
#if PA_WARP_SIZE != 32 && PA_WARP_SIZE != 64
#error "PA_WARP_SIZE must be 32 or 64"
#endif

#if defined(__HIPCC_RTC__) || defined(__HIPCC__)
#define PA_VENDOR_HIP 1
#else
#define PA_VENDOR_CUDA 1
#endif

#define PA_DEVICE __device__ __forceinline__

typedef long long pa_i64;

// ---- lanes and waves -------------------------------------------------------------------------------------

#if PA_WARP_SIZE == 64
typedef unsigned long long pa_lanemask_t;
#else
typedef unsigned int pa_lanemask_t;
#endif

PA_DEVICE int pa_lane_id() { return (int)(threadIdx.x % PA_WARP_SIZE); }
PA_DEVICE int pa_wave_id() { return (int)(threadIdx.x / PA_WARP_SIZE); }
PA_DEVICE pa_lanemask_t pa_full_mask() { return ~(pa_lanemask_t)0; }

// ---- cross-lane operations (explicit width: a power of two, at most PA_WARP_SIZE) ---------------------------

PA_DEVICE float pa_shfl_xor(float v, int lane_mask, int width) {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}
PA_DEVICE float pa_shfl(float v, int src_lane, int width) { return __shfl_sync(0xffffffffu, v, src_lane, width); }

// Butterfly reductions over groups of WIDTH consecutive lanes; every lane of the group gets the result.
template <int WIDTH>
PA_DEVICE float pa_group_max(float v) {
    static_assert(WIDTH >= 1 && WIDTH <= PA_WARP_SIZE && (WIDTH & (WIDTH - 1)) == 0, "bad group width");
#pragma unroll
    for (int m = WIDTH / 2; m > 0; m /= 2) v = fmaxf(v, pa_shfl_xor(v, m, WIDTH));
    return v;
}

template <int WIDTH>
PA_DEVICE float pa_group_sum(float v) {
    static_assert(WIDTH >= 1 && WIDTH <= PA_WARP_SIZE && (WIDTH & (WIDTH - 1)) == 0, "bad group width");
#pragma unroll
    for (int m = WIDTH / 2; m > 0; m /= 2) v += pa_shfl_xor(v, m, WIDTH);
    return v;
}

PA_DEVICE float pa_wave_max(float v) { return pa_group_max<PA_WARP_SIZE>(v); }
PA_DEVICE float pa_wave_sum(float v) { return pa_group_sum<PA_WARP_SIZE>(v); }

// ---- memory ------------------------------------------------------------------------------------------------

// 16-byte load / store; the address must be 16-byte aligned.
PA_DEVICE float4 pa_load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
PA_DEVICE void pa_store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
PA_DEVICE float4 pa_zero4() { return make_float4(0.f, 0.f, 0.f, 0.f); }

// Load VW (1, 2 or 4) consecutive floats with one access; the address must be aligned to VW floats.
template <int VW>
PA_DEVICE void pa_loadv(const float* p, float* out) {
    if constexpr (VW == 4) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        out[0] = t.x; out[1] = t.y; out[2] = t.z; out[3] = t.w;
    } else if constexpr (VW == 2) {
        const float2 t = *reinterpret_cast<const float2*>(p);
        out[0] = t.x; out[1] = t.y;
    } else {
        static_assert(VW == 1, "vector width must be 1, 2 or 4");
        out[0] = p[0];
    }
}

// ---- softmax arithmetic ------------------------------------------------------------------------------------

#define PA_LOG2E 1.4426950408889634f
#define PA_LN2 0.6931471805599453f

PA_DEVICE float pa_neg_inf() { return __int_as_float(0xff800000); }

#if defined(PA_VENDOR_CUDA)
PA_DEVICE float pa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#else
PA_DEVICE float pa_exp2(float x) { return exp2f(x); }
#endif

PA_DEVICE float pa_log2(float x) { return log2f(x); }
