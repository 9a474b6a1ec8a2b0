"""What every kernel family shares: tile configurations, the variant description, verification hooks.

A family module (``forward.py``, ...) holds its tile tables (data keyed by arch family, dtype and head dim), a
``KernelSpec`` subclass that knows its defines and shared memory, the variant choice (``select``) and its launch.
"""
from __future__ import annotations

import ctypes
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, ClassVar, TypeVar

import torch

from ..errors import UnsupportedTargetError
from ..runtime import environ
from ..runtime.backend import backend_for
from ..runtime.compiler import compile_kernel
from ..runtime.resources import blocks_per_multiprocessor
from ..runtime.target import Target, target_for

HEAD_DIMS = (32, 64, 96, 128, 256)
DTYPES = ("float32", "float16", "bfloat16")
HALF = ("float16", "bfloat16")

_LOG2E = 1.4426950408889634
_FLT_MIN = 1.1754943508222875e-38  # the smallest normal float32


def exp2_scale(scale: float) -> float:
    """The kernels' ``scale_log2``: the softmax scale (>= 0) in log2 units, at least the smallest normal float, so
    that a masked score (-inf) always gets an exponent of -inf; with a scale of 0 every finite score's product
    flushes to 0, as it should."""
    return max(scale * _LOG2E, _FLT_MIN)


@dataclass(frozen=True, kw_only=True)
class TileConfig:
    """One row of a tile table."""

    block_m: int  # query rows per block (backward: per query tile)
    block_n: int  # keys per streamed tile (backward: keys per block)
    threads: int  # threads per block
    row_lanes: int = 16  # simt kernels: lanes sharing one query row group (its max / sum reductions span them)
    warpgroup_mma: bool = False  # Hopper warpgroup MMA (wgmma; PA_MMA_WGMMA)
    min_blocks: int = 1  # blocks per SM / CU the compiler must fit registers for (PA_MIN_BLOCKS)
    split: int = 1  # backward: column slices of the head dim, one per block (PA_SPLIT)
    stages: int = 1  # backward dK/dV, decode: buffers of the streamed tiles; 2 overlaps copies and work (PA_STAGES)
    q_stages: int = 1  # Hopper warp-specialized forward: Q buffers (PA_Q_STAGES; 2 copies the next job's Q early)
    key_waves: int = 1  # decode: waves sharing the same query rows, each taking a slice of every key tile
    swizzled: bool = False  # decode, 16-bit mma.sync: shared tiles in the 128-byte swizzled layout (PA_TILE_SWIZZLED)
    qk_unroll_all: bool = False  # synchronous Q·Kᵀ tile products: the whole head dim's loop unrolled (PA_QK_UNROLL_ALL)
    kv_split: bool = False  # backward dK/dV, float32 on mma.sync: K and V split into TF32 parts once (PA_KV_SPLIT)
    dq_single: bool = False  # backward dK/dV, mma.sync and MFMA: dQ's units one at a time, not in pairs (PA_DQ_SINGLE)

    @property
    def options(self) -> list[str]:
        """The options beyond the shape, e.g. ["wgmma", "2/SM"]."""
        return (["wgmma"] * self.warpgroup_mma + [f"{self.min_blocks}/SM"] * (self.min_blocks > 1)
                + [f"split {self.split}"] * (self.split > 1)
                + [f"{self.stages} stages"] * (self.stages > 1)
                + [f"{self.q_stages} Q stages"] * (self.q_stages > 1)
                + [f"{self.key_waves} key waves"] * (self.key_waves > 1)
                + ["QK unrolled"] * self.qk_unroll_all + ["K, V split"] * self.kv_split
                + ["dQ units single"] * self.dq_single)


Rows = dict[tuple[str, int], TileConfig]
Row = TypeVar("Row")


def rows(dtypes: tuple[str, ...], by_head_dim: dict[int, Row]) -> dict[tuple[str, int], Row]:
    """Table rows: the same row (a tile, or the forward's length bands) for each dtype, per head dim."""
    return {(dt, d): row for dt in dtypes for d, row in by_head_dim.items()}


@dataclass(frozen=True)
class KernelSpec:
    """One kernel variant of a family: what to compile and how to launch it. Families subclass it and provide
    ``KERNELS`` (implementation -> (source file, entry point)), ``family_defines`` and ``smem_bytes``."""

    kernel: str  # implementation: "mma" (matrix units) or "simt"
    dtype: str
    head_dim: int
    tile: TileConfig
    lanes: int
    emulated: bool = False  # wave64 emulation on NVIDIA (verification mode)
    mask_ext: bool = False  # windows, variable lengths, softcap, ALiBi, mask tensors (PA_MASK_EXT)
    score_mods: bool = True  # with mask_ext, False: windows and variable lengths only (PA_SCORE_MOD 0)
    test_defines: tuple[tuple[str, int], ...] = ()  # set only by portattn.testing

    KERNELS: ClassVar[dict[str, tuple[str, str]]] = {}

    def __post_init__(self) -> None:
        if not (self.score_mods or self.mask_ext):
            raise ValueError("a build without the score modifiers is one of the extended masks (mask_ext)")

    @property
    def filename(self) -> str:
        return self.KERNELS[self.kernel][0]

    @property
    def function(self) -> str:
        return self.KERNELS[self.kernel][1]

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of one block (also passed to the kernel as PA_SMEM_BYTES and checked there)."""
        raise NotImplementedError

    def family_defines(self) -> dict[str, int]:
        return {}

    @property
    def defines(self) -> dict[str, int]:
        t = self.tile
        defines = {
            "PA_WARP_SIZE": self.lanes,
            "PA_HEAD_DIM": self.head_dim,
            "PA_BLOCK_M": t.block_m,
            "PA_BLOCK_N": t.block_n,
            "PA_THREADS": t.threads,
            "PA_SMEM_BYTES": self.smem_bytes,
        }
        if self.emulated:
            defines["PA_EMULATE_WAVE64"] = 1
        if self.dtype == "bfloat16":
            defines["PA_BF16"] = 1
        if self.float32_on_matrix_units:
            defines["PA_F32"] = 1
        if self.mask_ext:
            defines["PA_MASK_EXT"] = 1
        if not self.score_mods:
            defines["PA_SCORE_MOD"] = 0
        if t.qk_unroll_all:
            defines["PA_QK_UNROLL_ALL"] = 1
        return defines | self.family_defines() | dict(self.test_defines)

    @property
    def block_threads(self) -> int:
        """Threads of a launched block: the tile's, plus any helper warpgroup the kernel adds."""
        return self.tile.threads

    @property
    def float32_on_matrix_units(self) -> bool:
        """float32 inputs on a matrix-unit kernel (every kernel but simt): 3xTF32 on NVIDIA, fp32 MFMA on AMD."""
        return self.dtype == "float32" and self.kernel != "simt"

    @property
    def tf32_split(self) -> bool:
        """float32 as 3xTF32 (NVIDIA's matrix units, 32-lane warps): each float split into a TF32 part and a rest.
        Matrix-unit kernels on 64-lane waves (AMD, and its emulation) take float32 on fp32 MFMA."""
        return self.float32_on_matrix_units and self.lanes == 32

    @property
    def ieee_infinities(self) -> bool:
        """Whether infinite inputs give what IEEE arithmetic gives. Not for 3xTF32 (``tf32_split``): it splits
        x = ±inf into NaN parts, so NaN appears where the exact result is ±inf or finite."""
        return not self.tf32_split

    @property
    def options(self) -> list[str]:
        """The tile's options and the build's, e.g. ["wgmma", "ext masks"]."""
        return [*self.tile.options, *["ext masks"] * self.mask_ext, *["no score mods"] * (not self.score_mods)]

    @property
    def label(self) -> str:
        t = self.tile
        lanes = f"{self.lanes}l" + ("-emulated" if self.emulated else "")
        extra = [*self.options, *(f"{k}={v}" for k, v in self.test_defines)]
        return f"{self.function}[d={self.head_dim},{t.block_m}x{t.block_n},{t.threads}t,{','.join([lanes, *extra])}]"

    def check_fits(self, target: Target) -> None:
        """Refuse a variant whose shared memory does not fit ``target`` (and, under emulation, the emulated arch)."""
        limits = [target] + ([Target.for_arch(target.emulates)] if target.emulates else [])
        for t in limits:
            if self.smem_bytes > t.smem_per_block:
                raise UnsupportedTargetError(
                    f"{self.label} needs {self.smem_bytes} bytes of shared memory, {t.arch} allows {t.smem_per_block}"
                )


@dataclass(frozen=True)
class Overrides:
    """Verification hooks (portattn.testing): a forced target, a forced implementation ("mma" / "simt") and a
    transformation of the selected variant."""

    target: Target | None = None
    kernel: str | None = None
    tweak: Callable[[KernelSpec], KernelSpec] | None = None


NO_OVERRIDES = Overrides()
OVERRIDES: ContextVar[Overrides] = ContextVar("portattn_overrides", default=NO_OVERRIDES)

_resident: dict[tuple[KernelSpec, Target], int] = {}


def resident_blocks(spec: KernelSpec, target: Target) -> int:
    """Blocks of ``spec`` that ``target`` holds at once (compiles it when not cached). Kept per (spec, target): calls
    of new shapes plan their launches from it (a decode call whose key length is new, once per generated token)."""
    blocks = _resident.get((spec, target))
    if blocks is None:
        res = compile_kernel(spec, target).resources
        blocks = target.multiprocessors * blocks_per_multiprocessor(res, spec.block_threads, spec.smem_bytes, target)
        _resident[(spec, target)] = blocks
    return blocks


KERNEL_ENV = "PORTATTN_KERNEL"


def launch_target(device: object) -> Target:
    """The target that runs a call on ``device``: the detected one, or the one forced by the verification hooks
    (which must be the same GPU, e.g. its wave64 emulation)."""
    target = target_for(device)
    forced = OVERRIDES.get().target
    if forced is not None:
        if (forced.vendor, forced.arch) != (target.vendor, target.arch):
            raise UnsupportedTargetError(f"target {forced} cannot run on this device ({target})")
        return forced
    return target


def allocation(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A stand-in for tensors of ``shape``, ``dtype`` and ``device`` (one element, expanded), kept by a call
    signature: ``new_from`` allocates one at ``torch.empty_like``'s host cost, less than half of ``torch.empty``'s
    with a shape."""
    return torch.empty(1, dtype=dtype, device=device).expand(shape)


def new_from(like: torch.Tensor) -> torch.Tensor:
    """A new uninitialized contiguous tensor of the shape, dtype and device of ``like`` (a tensor, or a stand-in from
    ``allocation``)."""
    return torch.empty_like(like, memory_format=torch.contiguous_format)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # absent from CPU-only builds


def current_stream(device: torch.device) -> int:
    """The handle of torch's current stream on ``device`` (a CUDA or ROCm GPU), by torch's direct accessor where the
    build has one (a tenth of the cost of ``torch.cuda.current_stream``)."""
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


# Whether torch's current stream is capturing a CUDA graph: torch's own accessor (a third of the cost of
# ``torch.cuda.is_current_stream_capturing``, which wraps it), where the build has one.
capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


def forced_kernel() -> str | None:
    """The implementation asked for by the verification hooks or ``PORTATTN_KERNEL`` ("mma", "simt"), else None."""
    return OVERRIDES.get().kernel or environ.get(KERNEL_ENV) or None


def dtype_name(dtype: object) -> str:
    """The tables' name of a dtype: "float16" for ``torch.float16`` (a name is returned as it is)."""
    return str(dtype).removeprefix("torch.")


def selects(select: Callable[[Target, str, int], object], target: Target, dtype: object, head_dim: int) -> bool:
    """Whether a family's ``select`` finds a kernel for ``dtype`` (a torch dtype or its name) and ``head_dim`` on
    ``target`` (no variant is built)."""
    try:
        select(target, dtype_name(dtype), head_dim)
    except (NotImplementedError, UnsupportedTargetError, ValueError):
        return False
    return True


def set_strides(params: ctypes.Structure, tensors: dict[str, torch.Tensor]) -> None:
    """Set the element strides of dims 0..2 of each [batch, heads, rows, head_dim] tensor into ``params``' fields
    ``<name>_sb``, ``<name>_sh``, ``<name>_sn``; a size-1 dim gets stride 0 (it is never stepped)."""
    for name, t in tensors.items():
        for i, suffix in enumerate(("sb", "sh", "sn")):
            setattr(params, f"{name}_{suffix}", 0 if t.shape[i] == 1 else t.stride(i))


def set_tensor_maps(params: ctypes.Structure, target: Target, dtype: str,
                    maps: dict[str, tuple[torch.Tensor, int]]) -> None:
    """Encode each [batch, heads, rows, head_dim] tensor of ``maps`` (field name: tensor, box rows) into its bulk-copy
    map field of ``params``: dims (head_dim, rows, heads, batch), boxes of 128 bytes' worth of columns by the rows
    given. Only the tensor's layout and address are read."""
    driver = backend_for(target.vendor).driver
    for field, (t, box_rows) in maps.items():
        size = t.element_size()
        strides = tuple(16 if t.shape[i] == 1 else t.stride(i) * size for i in (2, 1, 0))
        code = driver.encode_tensor_map(dtype, t.data_ptr(), tuple(t.shape[::-1]), strides,
                                        (128 // size, box_rows, 1, 1), t.device.index)
        ctypes.memmove(ctypes.addressof(params) + getattr(type(params), field).offset, code, len(code))
