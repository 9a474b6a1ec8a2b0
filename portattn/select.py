"""Kernel choice: which kernel and which tile configuration for a target, dtype and head dim.

Tuning is data: ``TILE_TABLE`` maps (arch family, dtype, head dim) to a tile configuration. A row that is not
in the table is not supported, and the error says what is.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UnsupportedTargetError
from .target import Target

HEAD_DIMS = (32, 64, 96, 128, 256)
DTYPES = ("float32", "float16", "bfloat16")

# arch -> family; the family keys the tuning table.
ARCH_FAMILY: dict[str, str] = {
    "sm_80": "sm80",
    "sm_86": "sm86",
    "sm_89": "sm86",
    "sm_90": "sm90",
    "gfx908": "cdna1",
    "gfx90a": "cdna2",
    "gfx942": "cdna3",
    "gfx1100": "rdna3",
}

# Kernel families: source file and entry point, by dtype.
KERNELS: dict[str, tuple[str, str]] = {
    "float32": ("flash_fwd_f32.cu", "pa_flash_fwd_f32"),
    "float16": ("flash_fwd_mma.cu", "pa_flash_fwd_mma"),
    "bfloat16": ("flash_fwd_mma.cu", "pa_flash_fwd_mma"),
}


@dataclass(frozen=True)
class TileConfig:
    block_m: int  # query rows per block
    block_n: int  # keys per streamed tile
    threads: int  # threads per block
    row_lanes: int = 16  # lanes sharing one query row group (its max / sum reductions span them)


def _fp32_rows(cfg: dict[int, tuple[int, int, int]]) -> dict[tuple[str, int], TileConfig]:
    return {("float32", d): TileConfig(*v) for d, v in cfg.items()}


def _half_rows(cfg: dict[int, tuple[int, int, int]]) -> dict[tuple[str, int], TileConfig]:
    """The same tiles for float16 and bfloat16 (the matrix-unit kernel)."""
    return {(dt, d): TileConfig(*v) for dt in ("float16", "bfloat16") for d, v in cfg.items()}


_NV_LARGE_SMEM = _fp32_rows({32: (64, 64, 256), 64: (64, 64, 256), 96: (64, 32, 256), 128: (64, 64, 256),
                             256: (64, 64, 256)}) | _half_rows({
    32: (128, 64, 128), 64: (128, 64, 256), 96: (128, 64, 128), 128: (128, 32, 128), 256: (64, 64, 128)})
_NV_SMALL_SMEM = _fp32_rows({32: (64, 64, 256), 64: (64, 64, 256), 96: (64, 32, 256), 128: (64, 64, 256),
                             256: (32, 32, 128)}) | _half_rows({
    32: (128, 64, 128), 64: (128, 64, 256), 96: (128, 64, 128), 128: (128, 32, 128), 256: (64, 32, 128)})
# 64 KiB of LDS per CU: 8-wave workgroups under 64 KiB keep two waves on each SIMD (d = 256 in 16 bits: one).
_AMD = _fp32_rows({32: (64, 32, 512), 64: (64, 32, 512), 96: (64, 32, 512), 128: (64, 32, 512),
                   256: (32, 16, 512)})
_AMD_MFMA = _half_rows({32: (128, 64, 512), 64: (128, 64, 512), 96: (128, 64, 512), 128: (128, 32, 512),
                        256: (64, 16, 256)})
_AMD_MFMA_F16_ONLY = {key: tile for key, tile in _AMD_MFMA.items() if key[0] == "float16"}  # no bf16_1k on gfx908

TILE_TABLE: dict[str, dict[tuple[str, int], TileConfig]] = {
    "sm80": _NV_LARGE_SMEM,
    "sm86": _NV_SMALL_SMEM,
    "sm90": _NV_LARGE_SMEM,
    "cdna1": _AMD | _AMD_MFMA_F16_ONLY,
    "cdna2": _AMD | _AMD_MFMA,
    "cdna3": _AMD | _AMD_MFMA,
    "rdna3": _AMD,
}


@dataclass(frozen=True)
class KernelSpec:
    """Everything needed to build and launch one kernel variant."""

    filename: str
    function: str
    dtype: str
    head_dim: int
    tile: TileConfig
    lanes: int
    emulated: bool = False  # wave64 emulation on NVIDIA (verification mode)
    test_defines: tuple[tuple[str, int], ...] = ()  # set only by portattn.testing

    @property
    def defines(self) -> dict[str, int]:
        defines = {
            "PA_WARP_SIZE": self.lanes,
            "PA_HEAD_DIM": self.head_dim,
            "PA_BLOCK_M": self.tile.block_m,
            "PA_BLOCK_N": self.tile.block_n,
            "PA_THREADS": self.tile.threads,
            "PA_ROW_LANES": self.tile.row_lanes,
        }
        if self.emulated:
            defines["PA_EMULATE_WAVE64"] = 1
        if self.dtype == "bfloat16":
            defines["PA_BF16"] = 1
        return defines | dict(self.test_defines)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory. float32: Q tile, one K/V tile (padded rows) and the probability tile.
        16-bit: Q tile, K tile and V tile, rows padded by 16 bytes."""
        t = self.tile
        if self.dtype == "float32":
            ld = self.head_dim + 4
            return 4 * (t.block_m * ld + t.block_n * ld + t.block_m * (t.block_n + 4))
        return 2 * (t.block_m + 2 * t.block_n) * (self.head_dim + 8)

    @property
    def label(self) -> str:
        t = self.tile
        lanes = f"{self.lanes}l" + ("-emulated" if self.emulated else "")
        extra = "".join(f",{k}={v}" for k, v in self.test_defines)
        return f"{self.function}[d={self.head_dim},{t.block_m}x{t.block_n},{t.threads}t,{lanes}{extra}]"


def family(target: Target) -> str:
    """The tuning family of ``target`` (of the emulated arch under wave64 emulation)."""
    try:
        return ARCH_FAMILY[target.tuning_arch]
    except KeyError:
        raise UnsupportedTargetError(
            f"no kernel configuration for arch {target.tuning_arch!r}; supported: {', '.join(ARCH_FAMILY)}"
        ) from None


def select(target: Target, dtype: str, head_dim: int) -> KernelSpec:
    """The kernel variant for ``dtype`` and ``head_dim`` on ``target``."""
    table = TILE_TABLE[family(target)]
    if dtype not in KERNELS:
        raise NotImplementedError(f"dtype {dtype} is not supported yet; supported: {', '.join(DTYPES)}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported; supported: {', '.join(map(str, HEAD_DIMS))}")
    if (dtype, head_dim) not in table:
        raise NotImplementedError(f"{dtype} attention has no kernel for {target.tuning_arch} yet")
    filename, function = KERNELS[dtype]
    spec = KernelSpec(filename, function, dtype, head_dim, table[(dtype, head_dim)], target.lanes, target.emulated)
    limits = [target] + ([Target.for_arch(target.emulates)] if target.emulates else [])
    for t in limits:
        if spec.smem_bytes > t.smem_per_block:
            raise UnsupportedTargetError(
                f"{spec.label} needs {spec.smem_bytes} bytes of shared memory, {t.arch} allows {t.smem_per_block}"
            )
    return spec


def shipped_variants(target: Target) -> list[KernelSpec]:
    """Every kernel variant portattn would use on ``target``."""
    table = TILE_TABLE[family(target)]
    return [select(target, dtype, d) for dtype in DTYPES for d in HEAD_DIMS if (dtype, d) in table]
