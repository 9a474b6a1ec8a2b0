// portattn element types and copies (a prelude file): the input element type of a build (float16 / bfloat16 as raw
// 16-bit bits, or float32), its conversions, and global -> shared copies. A prelude file: it may know the vendor.
//
//   pa_elem                    the input element type (PA_F32: float; else pa_u16 holding float16 or bfloat16 bits)
//   pa_elem_to_float(x)        one element as a float
//   pa_pack_x2(lo, hi)         two floats rounded to the 16-bit type, packed (lo in the low half)
//   pa_store_elem(p, x)        store one element; pa_store_elem2(p, x, y) two adjacent ones (p aligned to two)
//   pa_async_copy16(dst, src, valid)   16-byte global -> shared copy (zeros when !valid); asynchronous on NVIDIA,
//   pa_async_copy4(dst, src, valid)    the same for 4 bytes,
//   pa_async_copy16_once(dst, src, valid)   the 16-byte copy of data read once (an L2 hint on NVIDIA),
//   pa_async_commit(), pa_async_wait<N>()   completed by committing groups and waiting for all but N of them
#pragma once

#include "pa_prelude.cuh"

#ifndef PA_BF16
#define PA_BF16 0
#endif
#ifndef PA_F32
#define PA_F32 0
#endif
#ifndef PA_MMA_WGMMA
#define PA_MMA_WGMMA 0  // 1: Hopper warpgroup MMA (sm_90a, 16-bit inputs) for the tile products
#endif
typedef unsigned short pa_u16;
#if PA_F32
typedef float pa_elem;
#else
typedef pa_u16 pa_elem;
#endif

#if defined(PA_VENDOR_CUDA)
PA_DEVICE unsigned pa_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16-byte global -> shared copy that bypasses registers; `valid == false` writes zeros instead.
PA_DEVICE void pa_async_copy16(void* dst_smem, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(pa_smem_addr(dst_smem)), "l"(src),
                 "r"(valid ? 16 : 0));
}
PA_DEVICE void pa_async_copy4(void* dst_smem, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(pa_smem_addr(dst_smem)), "l"(src),
                 "r"(valid ? 4 : 0));
}
// The same for data read once (decode's K and V rows), marked first to evict from the L2. One instruction, without a
// branch (small decode calls are bound by instruction issue). Rows of 256 bytes used to be fetched into the L2 256
// bytes at a time as well; on the swizzled decode tiles that ran 2-7 % slower on an H200 (docs/benchmarks.md).
PA_DEVICE void pa_async_copy16_once(void* dst_smem, const void* src, bool valid) {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(pa_smem_addr(dst_smem)),
                 "l"(src), "r"(valid ? 16 : 0), "l"(policy));
}
PA_DEVICE void pa_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N committed groups of this thread are still in flight.
// With the warpgroup MMA the copies are also made visible to its shared-memory operand reads (async proxy).
template <int N>
PA_DEVICE void pa_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#if PA_MMA_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Round two floats to the 16-bit type and pack them, `lo` in the low half.
PA_DEVICE unsigned pa_pack_x2(float lo, float hi) {
    unsigned r;
#if PA_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

PA_DEVICE float pa_elem_to_float(pa_elem x) {
#if PA_F32
    return x;
#elif PA_BF16
    return __uint_as_float((unsigned)x << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
#endif
}
#else
// HIP: plain copies, so the loads of the next tile are not overlapped with compute. The 16-bit conversions come from
// pa_mfma.cuh (64-lane waves); 32-lane builds take float32 elements only.
#if PA_WARP_SIZE == 64
#include "pa_mfma.cuh"
#elif !PA_F32
#error "16-bit elements on HIP need 64-lane waves"
#endif
PA_DEVICE void pa_async_copy16(void* dst_smem, const void* src, bool valid) {
    *static_cast<uint4*>(dst_smem) = valid ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}
PA_DEVICE void pa_async_copy4(void* dst_smem, const void* src, bool valid) {
    *static_cast<unsigned*>(dst_smem) = valid ? *static_cast<const unsigned*>(src) : 0u;
}
PA_DEVICE void pa_async_copy16_once(void* dst_smem, const void* src, bool valid) {
    pa_async_copy16(dst_smem, src, valid);
}
PA_DEVICE void pa_async_commit() {}
template <int N>
PA_DEVICE void pa_async_wait() {}

#if !PA_F32
PA_DEVICE unsigned pa_to_16bit(float x) {
#if PA_BF16
    return pa_mfma_bf16_bits(pa_mfma_bf16_from_float(x));
#else
    const pa_mfma_f16 h = pa_mfma_f16_from_float(x);
    unsigned short bits;
    __builtin_memcpy(&bits, &h, 2);
    return bits;
#endif
}
PA_DEVICE unsigned pa_pack_x2(float lo, float hi) { return pa_to_16bit(lo) | (pa_to_16bit(hi) << 16); }
#endif

PA_DEVICE float pa_elem_to_float(pa_elem x) {
#if PA_F32
    return x;
#elif PA_BF16
    return pa_mfma_bf16_to_float((pa_mfma_bf16)x);
#else
    pa_mfma_f16 h;
    __builtin_memcpy(&h, &x, 2);
    return pa_mfma_f16_to_float(h);
#endif
}
#endif

// Store one input-type element (a float rounded to the element type).
PA_DEVICE void pa_store_elem(pa_elem* p, float x) {
#if PA_F32
    *p = x;
#else
    *p = (pa_u16)(pa_pack_x2(x, 0.f) & 0xffffu);
#endif
}
// Store two adjacent elements p[0] = x, p[1] = y (p aligned to two elements).
PA_DEVICE void pa_store_elem2(pa_elem* p, float x, float y) {
#if PA_F32
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
#else
    *reinterpret_cast<unsigned*>(p) = pa_pack_x2(x, y);
#endif
}
