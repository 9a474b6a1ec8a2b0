// portattn vendor prelude: the only place in the device code that knows which vendor and lane count it is
// built for. Kernel bodies use the pa_* names below and never a literal lane count or lane mask.
//
// Defined by the host at compile time:
//   PA_WARP_SIZE       lanes per wave (32 on NVIDIA and RDNA wave32, 64 on CDNA).
//   PA_EMULATE_WAVE64  (NVIDIA only, with PA_WARP_SIZE=64) verification mode: a wave is two consecutive warps,
//                      and cross-lane operations follow the 64-lane semantics. Not a production mode.
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
// A kernel's parameter struct that holds tensor maps: the copy unit reads them where the launch put them.
#if defined(PA_VENDOR_CUDA)
#define PA_GRID_CONSTANT __grid_constant__
#else
#define PA_GRID_CONSTANT
#endif

typedef long long pa_i64;
// A bulk-copy tensor map (the driver's 128-byte CUtensorMap), encoded on the host; parameter structs carry it on
// both vendors, and only the Hopper warp-specialized kernels read it (pa_prelude_tma.cuh).
struct alignas(64) PaTensorMap {
    unsigned long long words[16];
};
// A divisor d >= 1 with the multiplier and shift that divide by it (pa_div), made by the host (runtime/params.py,
// divisor): kernels that take work items in a loop split each item's index without an integer division.
struct PaDiv {
    int d;
    unsigned mul;
    int shift;
};
// x / d for 0 <= x < 2^31: floor(x (2^32 + mul) / 2^(32 + shift)), exact where 2^(shift - 1) < d <= 2^shift.
PA_DEVICE int pa_div(const PaDiv& v, int x) { return (int)((__umulhi((unsigned)x, v.mul) + (unsigned)x) >> v.shift); }
PA_DEVICE int pa_mod(const PaDiv& v, int x) { return x - pa_div(v, x) * v.d; }

// ---- lanes and waves -------------------------------------------------------------------------------------

#if PA_WARP_SIZE == 64
typedef unsigned long long pa_lanemask_t;
#else
typedef unsigned int pa_lanemask_t;
#endif

PA_DEVICE int pa_lane_id() { return (int)(threadIdx.x % PA_WARP_SIZE); }
PA_DEVICE int pa_wave_id() { return (int)(threadIdx.x / PA_WARP_SIZE); }
PA_DEVICE pa_lanemask_t pa_full_mask() { return ~(pa_lanemask_t)0; }

// ---- cross-lane operations ---------------------------------------------------------------------------------
// Semantics (both vendors): lanes form segments of `width` consecutive lanes (a power of two, at most
// PA_WARP_SIZE). pa_shfl_xor reads lane (self ^ lane_mask), or its own value when that lane lies in a later
// segment; pa_shfl reads lane (src_lane % width) of its own segment; pa_ballot gives bit i = predicate of lane i.
// Every lane of the wave must call them together, with the same lane_mask / width.

#if defined(PA_EMULATE_WAVE64) && !defined(PA_VENDOR_CUDA)
#error "PA_EMULATE_WAVE64 is an NVIDIA verification mode"
#endif

#if defined(PA_VENDOR_CUDA) && defined(PA_EMULATE_WAVE64)
#if PA_WARP_SIZE != 64
#error "PA_EMULATE_WAVE64 needs PA_WARP_SIZE=64"
#endif
// Wave64 emulation: a wave is warps 2w and 2w+1. A partner in the same warp is reached with a native shuffle;
// one in the other warp through a per-wave shared-memory slot row, ordered by a named barrier per wave
// (barrier 0 stays __syncthreads'). Named barriers 1..15 allow at most 15 waves (960 threads) per block.
#define PA_EMU_MAX_WAVES 15
#if defined(PA_THREADS)
static_assert(PA_THREADS / 64 <= PA_EMU_MAX_WAVES, "wave64 emulation supports at most 15 waves per block");
#endif
static __shared__ unsigned pa_emu_slots[PA_EMU_MAX_WAVES][64];

PA_DEVICE void pa_emu_wave_barrier() { asm volatile("bar.sync %0, 64;" ::"r"(1 + pa_wave_id()) : "memory"); }

// Every lane publishes `v`; returns the value published by lane `src` (0..63) of the same wave.
PA_DEVICE unsigned pa_emu_exchange(unsigned v, int src) {
    unsigned* row = pa_emu_slots[pa_wave_id()];
    row[pa_lane_id()] = v;
    pa_emu_wave_barrier();
    const unsigned r = row[src];
    pa_emu_wave_barrier();  // the row is reused by the next exchange
    return r;
}

PA_DEVICE float pa_shfl_xor(float v, int lane_mask, int width) {
    if (lane_mask < 32) return __shfl_xor_sync(0xffffffffu, v, lane_mask, width < 32 ? width : 32);
    const int self = pa_lane_id();
    const int src = self ^ lane_mask;
    const int segment_end = (self + width) & ~(width - 1);
    return __uint_as_float(pa_emu_exchange(__float_as_uint(v), src >= segment_end ? self : src));
}

PA_DEVICE float pa_shfl(float v, int src_lane, int width) {
    if (width <= 32) return __shfl_sync(0xffffffffu, v, src_lane, width);
    return __uint_as_float(pa_emu_exchange(__float_as_uint(v), src_lane & 63));
}

PA_DEVICE pa_lanemask_t pa_ballot(bool pred) {
    const unsigned mine = __ballot_sync(0xffffffffu, pred);
    const int half = pa_lane_id() / 32;
    const unsigned other = pa_emu_exchange(mine, 32 * (1 - half));
    const unsigned lo = half == 0 ? mine : other;
    const unsigned hi = half == 0 ? other : mine;
    return ((pa_lanemask_t)hi << 32) | lo;
}
#else
// Native waves; hipify turns these into HIP's mask-free forms.
PA_DEVICE float pa_shfl_xor(float v, int lane_mask, int width) {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}
PA_DEVICE float pa_shfl(float v, int src_lane, int width) { return __shfl_sync(0xffffffffu, v, src_lane, width); }
PA_DEVICE pa_lanemask_t pa_ballot(bool pred) { return __ballot_sync(0xffffffffu, pred); }
#endif

// v, which the caller knows is the same in every lane of the wave, as lane 0 holds it: the compiler then knows it too,
// and keeps it and what follows from it in scalar (uniform) registers and branches. A value derived from threadIdx
// (a warpgroup's index) otherwise takes vector registers, and so does every loop bound and address computed from it.
PA_DEVICE int pa_wave_uniform(int v) {
#if defined(PA_VENDOR_HIP)
    return __builtin_amdgcn_readfirstlane(v);
#else
    return __shfl_sync(0xffffffffu, v, 0);
#endif
}

// pa_shfl of a pointer: two 32-bit shuffles (bit patterns pass through unchanged).
PA_DEVICE const void* pa_shfl_ptr(const void* v, int src_lane, int width) {
    const unsigned long long bits = reinterpret_cast<unsigned long long>(v);
    const unsigned lo = __float_as_uint(pa_shfl(__uint_as_float((unsigned)bits), src_lane, width));
    const unsigned hi = __float_as_uint(pa_shfl(__uint_as_float((unsigned)(bits >> 32)), src_lane, width));
    return reinterpret_cast<const void*>(((unsigned long long)hi << 32) | lo);
}

// Butterfly reductions over segments of WIDTH lanes; every lane of the segment gets the result.
#if defined(PA_TESTING_WAVE32_REDUCTION_BUG)
// Deliberately wrong, for the test suite's sensitivity check only: reductions stop at 32 lanes.
#define PA_REDUCTION_START(WIDTH) ((WIDTH) > 32 ? 16 : (WIDTH) / 2)
#else
#define PA_REDUCTION_START(WIDTH) ((WIDTH) / 2)
#endif

template <int WIDTH>
PA_DEVICE float pa_group_max(float v) {
    static_assert(WIDTH >= 1 && WIDTH <= PA_WARP_SIZE && (WIDTH & (WIDTH - 1)) == 0, "bad group width");
#pragma unroll
    for (int m = PA_REDUCTION_START(WIDTH); m > 0; m /= 2) v = fmaxf(v, pa_shfl_xor(v, m, WIDTH));
    return v;
}

template <int WIDTH>
PA_DEVICE float pa_group_sum(float v) {
    static_assert(WIDTH >= 1 && WIDTH <= PA_WARP_SIZE && (WIDTH & (WIDTH - 1)) == 0, "bad group width");
#pragma unroll
    for (int m = PA_REDUCTION_START(WIDTH); m > 0; m /= 2) v += pa_shfl_xor(v, m, WIDTH);
    return v;
}

PA_DEVICE float pa_wave_max(float v) { return pa_group_max<PA_WARP_SIZE>(v); }
PA_DEVICE float pa_wave_sum(float v) { return pa_group_sum<PA_WARP_SIZE>(v); }

// ---- memory ------------------------------------------------------------------------------------------------

// 16-byte load / store; the address must be 16-byte aligned.
PA_DEVICE float4 pa_load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
PA_DEVICE void pa_store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
PA_DEVICE float4 pa_zero4() { return make_float4(0.f, 0.f, 0.f, 0.f); }

// p[0] += a and p[1] += b in global memory, atomically per element (p aligned to 8 bytes); one vector reduction
// where the target has it (NVIDIA sm_90 and later).
PA_DEVICE void pa_atomic_add2(float* p, float a, float b) {
#if defined(PA_VENDOR_CUDA) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

// p[0..3] += v, atomically per element (p aligned to 16 bytes); one vector reduction on NVIDIA sm_90 and later.
PA_DEVICE void pa_atomic_add4(float* p, float4 v) {
#if defined(PA_VENDOR_CUDA) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
#else
    atomicAdd(p, v.x);
    atomicAdd(p + 1, v.y);
    atomicAdd(p + 2, v.z);
    atomicAdd(p + 3, v.w);
#endif
}

// ---- overlapping launches ------------------------------------------------------------------------------------
// A kernel the host launches to overlap the end of the previous kernel on its stream (programmatic dependent
// launch: NVIDIA sm_90 and later) may start before that kernel ends. pa_wait_prior_grid() returns once the previous
// kernel has ended and its writes are visible: call it before touching memory that kernel may write.
// pa_release_next_grid() lets the next such kernel's blocks be placed once every block of this one has called it
// (or ended). Elsewhere, and in a normal launch, kernels run in stream order and both do nothing.
PA_DEVICE void pa_wait_prior_grid() {
#if defined(PA_VENDOR_CUDA) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
PA_DEVICE void pa_release_next_grid() {
#if defined(PA_VENDOR_CUDA) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Load VW (1, 2 or 4) consecutive floats with one access; the address must be aligned to VW floats.
template <int VW>
PA_DEVICE void pa_loadv(const float* p, float* out) {
    if constexpr (VW == 4) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        out[0] = t.x;
        out[1] = t.y;
        out[2] = t.z;
        out[3] = t.w;
    } else if constexpr (VW == 2) {
        const float2 t = *reinterpret_cast<const float2*>(p);
        out[0] = t.x;
        out[1] = t.y;
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

// The natural-log LSE of a softmax row from its running maximum (log2 units; -inf when every key was masked) and
// its sum of exp2(score - max).
PA_DEVICE float pa_row_lse(float max_log2, float sum) {
    return ((max_log2 == pa_neg_inf() ? 0.f : max_log2) + pa_log2(sum)) * PA_LN2;
}

// A bfloat16 / float16 value given as its bits (the portable decoding: attention masks, not the hot loops).
PA_DEVICE float pa_bf16_bits_to_float(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
PA_DEVICE float pa_f16_bits_to_float(unsigned short h) {
    const unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0u) return (sign ? -1.f : 1.f) * (float)man * 5.9604644775390625e-8f;  // subnormal: man 2^-24
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}
