"""The CUDA -> HIP translation rules, as data.

Each Rule says what CUDA construct it matches, what it becomes for HIP and why. ``translate.py`` applies them;
the table is the single place to read or extend the mapping. Kinds:

- ``rename``          identifier ``cuda`` becomes identifier ``hip``.
- ``keep``            identifier exists with the same meaning under HIP (hiprtc 5.2 and current ROCm); listed so
                      that the decision is written down, the text is left as it is.
- ``drop-mask``       call ``cuda(mask, args...)`` becomes ``hip(args...)``: HIP's cross-lane calls without
                      ``_sync`` take no mask (hiprtc 5.2 has no ``*_sync`` forms, ROCm 6+ wants a 64-bit mask).
                      ``arity`` is the accepted argument count of the CUDA call, mask included.
- ``replace-call``    the whole call ``cuda(args...)`` becomes the expression ``hip``; its arguments are dropped.
- ``include``         ``#include <cuda>`` becomes the directive block ``hip``.
- ``refuse``          identifier ``cuda`` has no safe HIP form: translation stops, ``note`` is the hint.
- ``refuse-include``  ``#include <cuda>`` has no safe HIP form: translation stops, ``note`` is the hint.

Identifier rules do not apply to names that the translated tree defines itself (a user's ``cudaCheck`` macro).
Besides the table, translate.py refuses inline assembly, ``warpSize`` in constant contexts and unknown ``cuda*``
runtime names or ``<cuda...>`` headers, and in project mode lane constants and ``warpSize`` outside the prelude;
wave64.py decides what cross-lane code means on a 64-lane wave (see translate.CHECKS).
"""
from __future__ import annotations

from dataclasses import dataclass

from .math_constants import header_block

RENAME = "rename"
KEEP = "keep"
DROP_MASK = "drop-mask"
REPLACE_CALL = "replace-call"
INCLUDE = "include"
REFUSE = "refuse"
REFUSE_INCLUDE = "refuse-include"
KINDS = (RENAME, KEEP, DROP_MASK, REPLACE_CALL, INCLUDE, REFUSE, REFUSE_INCLUDE)


@dataclass(frozen=True)
class Rule:
    """One translation rule; see the module docstring for the meaning of ``kind``."""

    id: str
    kind: str
    cuda: str  # identifier, or header name (without <>) for the include kinds
    hip: str  # replacement identifier / expression / directive block; "" for refusals and keeps
    note: str  # why the mapping is right; for refusals the hint shown to the user
    arity: tuple[int, ...] = ()  # accepted argument counts of the CUDA call (call kinds only)


# hiprtc has hip_runtime built in and (5.2) fails on including hip_fp16.h; hipcc needs the includes.
_HIP_RUNTIME_BLOCK = "#if !defined(__HIPCC_RTC__)\n#include <hip/hip_runtime.h>\n#endif"
_HIP_FP16_BLOCK = "#if !defined(__HIPCC_RTC__)\n#include <hip/hip_fp16.h>\n#endif"

# Wave-level barrier: lanes of a wave run in lockstep, so no hardware barrier is needed; the two fences order
# memory between the lanes and the wave barrier keeps the compiler from moving code across the point.
SYNCWARP_HIP = (
    '(__builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"), __builtin_amdgcn_wave_barrier(), '
    '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront"))'
)

_NO_BF16 = (
    "hiprtc 5.2 has no bf16 type: carry bf16 as raw 16-bit bits (unsigned short) and convert by hand in a "
    "vendor-neutral prelude helper"
)
_NO_WAVE_OP = "no HIP counterpart; build it from pa_* cross-lane operations of the prelude"
_NO_STD_HEADER = "fails under hiprtc 5.2 (redefinitions); use the prelude's own types (pa_i64, ...)"
_NO_HALF_MINMAX = "hiprtc 5.2 has no 16-bit min / max: compare with __hlt / __hgt and select, or work in float"

_WARP_RULES = [
    Rule("shfl-xor-sync", DROP_MASK, "__shfl_xor_sync", "__shfl_xor",
         "xor shuffle; the width argument is kept", (3, 4)),
    Rule("shfl-sync", DROP_MASK, "__shfl_sync", "__shfl", "indexed shuffle; the width argument is kept", (3, 4)),
    Rule("shfl-up-sync", DROP_MASK, "__shfl_up_sync", "__shfl_up", "shuffle up; the width argument is kept", (3, 4)),
    Rule("shfl-down-sync", DROP_MASK, "__shfl_down_sync", "__shfl_down",
         "shuffle down; the width argument is kept", (3, 4)),
    Rule("ballot-sync", DROP_MASK, "__ballot_sync", "__ballot",
         "HIP's ballot returns a 64-bit lane mask on wave64 (pa_lanemask_t)", (2,)),
    Rule("any-sync", DROP_MASK, "__any_sync", "__any", "wave vote: any lane", (2,)),
    Rule("all-sync", DROP_MASK, "__all_sync", "__all", "wave vote: all lanes", (2,)),
    Rule("syncwarp", REPLACE_CALL, "__syncwarp", SYNCWARP_HIP,
         "hiprtc 5.2 has no __syncwarp; a wave runs in lockstep, so a wave-scope release/acquire fence pair around "
         "a wave barrier gives the same ordering; the optional mask is dropped (the whole wave takes part)", (0, 1)),
    Rule("activemask", REPLACE_CALL, "__activemask", "__ballot(1)",
         "the lanes that execute the ballot are the active ones", (0,)),
    Rule("match-any-sync", REFUSE, "__match_any_sync", "", _NO_WAVE_OP),
    Rule("match-all-sync", REFUSE, "__match_all_sync", "", _NO_WAVE_OP),
    Rule("reduce-add-sync", REFUSE, "__reduce_add_sync", "", _NO_WAVE_OP),
    Rule("reduce-min-sync", REFUSE, "__reduce_min_sync", "", _NO_WAVE_OP),
    Rule("reduce-max-sync", REFUSE, "__reduce_max_sync", "", _NO_WAVE_OP),
]

_DEVICE_RULES = [
    Rule("trap", RENAME, "__trap", "__builtin_trap", "aborts the kernel; HIP has the compiler builtin only"),
    Rule("nanosleep", REFUSE, "__nanosleep", "",
         "no HIP form with a time argument (__builtin_amdgcn_s_sleep counts 64-cycle units and needs a constant)"),
]

_TYPE_RULES = [
    Rule("half", KEEP, "__half", "", "hiprtc 5.2 and current ROCm provide __half (and its conversions)"),
    Rule("half2", KEEP, "__half2", "", "hiprtc 5.2 and current ROCm provide __half2"),
    Rule("nv-bfloat16", REFUSE, "__nv_bfloat16", "", _NO_BF16),
    Rule("nv-bfloat162", REFUSE, "__nv_bfloat162", "", _NO_BF16),
    Rule("float2bfloat16", REFUSE, "__float2bfloat16", "", _NO_BF16),
    Rule("bfloat162float", REFUSE, "__bfloat162float", "", _NO_BF16),
    Rule("hmax", REFUSE, "__hmax", "", _NO_HALF_MINMAX),
    Rule("hmin", REFUSE, "__hmin", "", _NO_HALF_MINMAX),
    Rule("hmax2", REFUSE, "__hmax2", "", _NO_HALF_MINMAX),
    Rule("hmin2", REFUSE, "__hmin2", "", _NO_HALF_MINMAX),
]

_INCLUDE_RULES = [
    Rule("inc-cuda-runtime", INCLUDE, "cuda_runtime.h", _HIP_RUNTIME_BLOCK,
         "hiprtc includes hip_runtime itself; hipcc gets the header"),
    Rule("inc-cuda-runtime-api", INCLUDE, "cuda_runtime_api.h", _HIP_RUNTIME_BLOCK,
         "hiprtc includes hip_runtime itself; hipcc gets the header"),
    Rule("inc-cuda", INCLUDE, "cuda.h", _HIP_RUNTIME_BLOCK, "driver API names live in hip_runtime"),
    Rule("inc-device-launch-parameters", INCLUDE, "device_launch_parameters.h", _HIP_RUNTIME_BLOCK,
         "threadIdx and friends come with hip_runtime"),
    Rule("inc-cuda-fp16", INCLUDE, "cuda_fp16.h", _HIP_FP16_BLOCK,
         "under hiprtc 5.2 __half needs no include and including hip_fp16.h fails; hipcc gets the header"),
    Rule("inc-math-constants", INCLUDE, "math_constants.h", header_block(),
         "hiprtc has no math_constants.h: the CUDART_* constants are defined in place, with CUDA's values"),
    Rule("inc-cuda-bf16", REFUSE_INCLUDE, "cuda_bf16.h", "", _NO_BF16 + "; drop the include"),
    Rule("inc-mma", REFUSE_INCLUDE, "mma.h", "",
         "WMMA has no hiprtc form; put matrix-core code behind the prelude's tile abstraction (MFMA builtins)"),
    Rule("inc-cooperative-groups", REFUSE_INCLUDE, "cooperative_groups.h", "",
         "use __syncthreads() and the prelude's pa_* cross-lane operations"),
    Rule("inc-cuda-pipeline", REFUSE_INCLUDE, "cuda_pipeline.h", "",
         "async copies are vendor specific: put them in a vendor-guarded prelude section"),
    Rule("inc-cstdint", REFUSE_INCLUDE, "cstdint", "", _NO_STD_HEADER),
    Rule("inc-stdint", REFUSE_INCLUDE, "stdint.h", "", _NO_STD_HEADER),
    Rule("inc-type-traits", REFUSE_INCLUDE, "type_traits", "", _NO_STD_HEADER),
]

# Runtime and driver API names (host code, or device code that names a stream or an error type).
_API_NAMES = [
    ("cudaStream_t", "hipStream_t"),
    ("cudaEvent_t", "hipEvent_t"),
    ("cudaError_t", "hipError_t"),
    ("cudaSuccess", "hipSuccess"),
    ("cudaGetLastError", "hipGetLastError"),
    ("cudaGetErrorString", "hipGetErrorString"),
    ("cudaMalloc", "hipMalloc"),
    ("cudaFree", "hipFree"),
    ("cudaMemcpy", "hipMemcpy"),
    ("cudaMemcpyAsync", "hipMemcpyAsync"),
    ("cudaMemset", "hipMemset"),
    ("cudaMemsetAsync", "hipMemsetAsync"),
    ("cudaMemcpyHostToDevice", "hipMemcpyHostToDevice"),
    ("cudaMemcpyDeviceToHost", "hipMemcpyDeviceToHost"),
    ("cudaMemcpyDeviceToDevice", "hipMemcpyDeviceToDevice"),
    ("cudaDeviceSynchronize", "hipDeviceSynchronize"),
    ("cudaStreamSynchronize", "hipStreamSynchronize"),
    ("cudaFuncSetAttribute", "hipFuncSetAttribute"),
    ("cudaFuncAttributeMaxDynamicSharedMemorySize", "hipFuncAttributeMaxDynamicSharedMemorySize"),
    ("cudaDeviceProp", "hipDeviceProp_t"),
    ("cudaGetDeviceProperties", "hipGetDeviceProperties"),
    ("cudaLaunchKernel", "hipLaunchKernel"),
    ("CUstream", "hipStream_t"),
    ("CUresult", "hipError_t"),
    ("CUDA_SUCCESS", "hipSuccess"),
    ("CUdeviceptr", "hipDeviceptr_t"),
    ("CUfunction", "hipFunction_t"),
    ("CUmodule", "hipModule_t"),
]
_API_RULES = [Rule(f"api-{cuda}", RENAME, cuda, hip, "same API under HIP") for cuda, hip in _API_NAMES]

RULES: tuple[Rule, ...] = tuple(_WARP_RULES + _DEVICE_RULES + _TYPE_RULES + _INCLUDE_RULES + _API_RULES)


def _index(kinds: tuple[str, ...]) -> dict[str, Rule]:
    return {r.cuda: r for r in RULES if r.kind in kinds}


IDENT_RULES: dict[str, Rule] = _index((RENAME, KEEP, DROP_MASK, REPLACE_CALL, REFUSE))
INCLUDE_RULES: dict[str, Rule] = _index((INCLUDE, REFUSE_INCLUDE))


def _validate() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)), "duplicate rule id"
    assert all(r.kind in KINDS for r in RULES), "unknown rule kind"
    keys = [(r.kind in (INCLUDE, REFUSE_INCLUDE), r.cuda) for r in RULES]
    assert len(keys) == len(set(keys)), "two rules match the same CUDA name"


_validate()
