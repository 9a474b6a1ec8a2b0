// portattn Hopper (sm_90a) block-level pipeline pieces (a prelude file): transaction barriers in shared memory
// (mbarrier), bulk tensor copies (TMA) that complete on them, bulk tensor stores, named barriers between warpgroups and
// register reallocation between warpgroups (setmaxnreg). Used by the warp-specialized kernels only.
#pragma once

#include "pa_mma.cuh"

#if !defined(PA_VENDOR_CUDA) || !PA_MMA_WGMMA
#error "pa_prelude_tma.cuh needs NVIDIA Hopper (sm_90a) and the warpgroup MMA build"
#endif
#if defined(PA_VENDOR_CUDA)

// A barrier that completes a phase when `count` threads have arrived and every byte announced with
// pa_mbar_expect_bytes has landed. Phases alternate parity 0, 1, 0, ...
PA_DEVICE void pa_mbar_init(unsigned long long* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(pa_smem_addr(bar)), "r"(count) : "memory");
}
// After the initializations, before the block barrier that publishes them (to the copy unit as well).
PA_DEVICE void pa_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
PA_DEVICE void pa_mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(pa_smem_addr(bar)) : "memory");
}
// Arrive and announce `bytes` more bytes of bulk copies that complete on this phase.
PA_DEVICE void pa_mbar_expect_bytes(unsigned long long* bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(pa_smem_addr(bar)), "r"(bytes)
                 : "memory");
}
// Wait until the phase of parity `parity` has completed.
PA_DEVICE void pa_mbar_wait(unsigned long long* bar, int parity) {
    asm volatile(
        "{\n.reg .pred done;\nPA_MBAR_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra PA_MBAR_WAIT;\n}\n" ::"r"(pa_smem_addr(bar)),
        "r"(parity)
        : "memory");
}

// Tensor maps (PaTensorMap, made on the host) passed in a __grid_constant__ parameter struct.
PA_DEVICE void pa_tma_prefetch(const PaTensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}
// Copy the box at coordinates (c0, c1, c2, c3) of a four-dimensional map into shared memory at dst (1024-byte
// aligned for the 128-byte swizzle); its bytes complete on bar. Coordinates past the tensor read as zeros.
PA_DEVICE void pa_tma_load4(void* dst, const PaTensorMap* map, int c0, int c1, int c2, int c3,
                            unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(pa_smem_addr(dst)),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(pa_smem_addr(bar))
        : "memory");
}

// Copy the box at coordinates (c0, c1, c2, c3) of a four-dimensional map from shared memory at src (1024-byte
// aligned, written by ordinary stores made visible to the copy unit with fence.proxy.async before the barrier that
// publishes them); the part of the box past the tensor is not written. The copy joins this thread's bulk group.
PA_DEVICE void pa_tma_store4(const PaTensorMap* map, int c0, int c1, int c2, int c3, const void* src) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(pa_smem_addr(src))
                 : "memory");
}
// Close this thread's bulk group; wait until every closed group has read its shared memory (it may be reused).
PA_DEVICE void pa_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
PA_DEVICE void pa_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// The lanes of this warp meet; their shared-memory writes before it are visible to each other after it.
PA_DEVICE void pa_warp_sync() { __syncwarp(); }

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads: sync waits, arrive does not.
PA_DEVICE void pa_named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
PA_DEVICE void pa_named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers per thread that a block of `threads` threads holds at launch: its launch bound's count, which ptxas
// uses in full (the code after a pa_regs_inc is compiled to the raised count). Warpgroups that move registers
// between them must ask for no more than these in all, or one asking for more would wait forever.
__host__ __device__ constexpr int pa_launch_regs(int threads) { return 65536 / threads / 8 * 8; }

// Give registers back (DEC) or take them (INC): the warpgroup's threads hold REGS registers each afterwards.
template <int REGS>
PA_DEVICE void pa_regs_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
PA_DEVICE void pa_regs_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
#endif  // PA_VENDOR_CUDA
