"""Kernel choice: which kernel and which tile configuration for a target, dtype and head dim.

Tuning is data: ``MMA_TILES`` and ``SIMT_TILES`` map (arch family, dtype, head dim) to a tile configuration of the
matrix-unit and the simt kernel. The matrix-unit row wins where there is one; a shape with no row in either table
is not supported, and the error says so.
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

# Kernels: source file and entry point. "mma" runs on the matrix units (16-bit inputs; float32 as 3xTF32 on NVIDIA,
# fp32 MFMA on AMD), "simt" is the portable float32 kernel for targets or shapes without a matrix-unit row.
KERNELS: dict[str, tuple[str, str]] = {
    "mma": ("flash_fwd_mma.cu", "pa_flash_fwd_mma"),
    "simt": ("flash_fwd_f32.cu", "pa_flash_fwd_f32"),
}


@dataclass(frozen=True)
class TileConfig:
    block_m: int  # query rows per block
    block_n: int  # keys per streamed tile
    threads: int  # threads per block
    row_lanes: int = 16  # simt kernel: lanes sharing one query row group (its max / sum reductions span them)
    warpgroup_mma: bool = False  # mma kernel on Hopper: warpgroup MMA (wgmma; PA_MMA_WGMMA)
    min_blocks: int = 1  # mma kernel: blocks per SM / CU the compiler must fit registers for (PA_MIN_BLOCKS)
    persistent: bool = False  # mma kernel: min_blocks blocks per SM / CU loop over the work items (PA_PERSISTENT)


Rows = dict[tuple[str, int], TileConfig]


def _rows(dtypes: tuple[str, ...], cfg: dict[int, tuple[int, int, int]]) -> Rows:
    return {(dt, d): TileConfig(*v) for dt in dtypes for d, v in cfg.items()}


HALF = ("float16", "bfloat16")

# Matrix-unit kernel: (dtype, head dim) -> tile, per family.
# float32 d = 256 has no tile without register spills (the 3xTF32 fragments are twice as large): simt kernel.
_NV_MMA = _rows(HALF, {32: (128, 64, 256), 64: (128, 64, 128), 96: (128, 64, 128), 128: (128, 32, 128),
                       256: (64, 64, 128)}) | _rows(("float32",), {
    32: (64, 64, 128), 64: (128, 32, 128), 96: (64, 32, 128), 128: (64, 64, 128)})
_NV_MMA_SMALL_SMEM = _NV_MMA | _rows(HALF, {256: (64, 32, 128)})
# Hopper: warpgroup MMA for the 16-bit head dims that are multiples of 64 and whose accumulators fit (d <= 128),
# 64 query rows per warpgroup. d = 64: two warpgroups per block and two blocks per SM (within 128 registers), so
# one block's start (Q load, first scores) overlaps the other's work; d = 128 needs more registers than that and
# runs three warpgroups, one block per SM.
_NV_MMA_HOPPER = _NV_MMA | {(dt, d): TileConfig(bm, 64, nt, warpgroup_mma=True, min_blocks=mb)
                            for dt in HALF for d, (bm, nt, mb) in {64: (128, 256, 2), 128: (192, 384, 1)}.items()}
# 64 KiB of LDS per CU: 8-wave workgroups within it keep two waves on each SIMD; the 16-bit d = 256 and float32
# d = 96 / 128 tiles fit one 4-wave workgroup per CU (one wave per SIMD); float32 d = 256 has no matrix-unit tile
# that fits and runs the simt kernel.
_AMD_MFMA = _rows(HALF, {32: (128, 64, 512), 64: (128, 64, 512), 96: (128, 64, 512), 128: (128, 32, 512),
                         256: (64, 16, 256)}) | _rows(("float32",), {
    32: (128, 64, 512), 64: (128, 32, 512), 96: (64, 32, 256), 128: (64, 16, 256)})
_AMD_MFMA_NO_BF16 = {key: tile for key, tile in _AMD_MFMA.items() if key[0] != "bfloat16"}  # gfx908: no bf16_1k

MMA_TILES: dict[str, Rows] = {
    "sm80": _NV_MMA,
    "sm86": _NV_MMA_SMALL_SMEM,
    "sm90": _NV_MMA_HOPPER,
    "cdna1": _AMD_MFMA_NO_BF16,
    "cdna2": _AMD_MFMA,
    "cdna3": _AMD_MFMA,
    "rdna3": {},
}

# simt kernel (float32 only).
_NV_SIMT = _rows(("float32",), {32: (64, 64, 256), 64: (64, 64, 256), 96: (64, 32, 256), 128: (64, 64, 256),
                                256: (64, 64, 256)})
_NV_SIMT_SMALL_SMEM = _NV_SIMT | _rows(("float32",), {256: (32, 32, 128)})
_AMD_SIMT = _rows(("float32",), {32: (64, 32, 512), 64: (64, 32, 512), 96: (64, 32, 512), 128: (64, 32, 512),
                                 256: (32, 16, 512)})

SIMT_TILES: dict[str, Rows] = {
    "sm80": _NV_SIMT,
    "sm86": _NV_SIMT_SMALL_SMEM,
    "sm90": _NV_SIMT,
    "cdna1": _AMD_SIMT,
    "cdna2": _AMD_SIMT,
    "cdna3": _AMD_SIMT,
    "rdna3": _AMD_SIMT,
}
TABLES: dict[str, dict[str, Rows]] = {"mma": MMA_TILES, "simt": SIMT_TILES}

# Short sequences (at most SHORT_SEQLEN query rows): matrix-unit rows that differ from MMA_TILES. With few key tiles
# per block, a block's start is a larger share of its time and a tall tile's padding rows cost more. Hopper
# d = 128: two warpgroups (128 rows) instead of three (192), and persistent blocks, which load the next item's Q
# while finishing the current one.
SHORT_SEQLEN = 1024
MMA_TILES_SHORT: dict[str, Rows] = {
    "sm90": {(dt, 128): TileConfig(128, 64, 256, warpgroup_mma=True, persistent=True) for dt in HALF},
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
    def kernel(self) -> str:
        """"mma" or "simt" (see KERNELS)."""
        return "simt" if self.filename == KERNELS["simt"][0] else "mma"

    @property
    def ieee_infinities(self) -> bool:
        """Whether infinite inputs give what IEEE arithmetic gives. Not for float32 on NVIDIA's matrix units:
        3xTF32 splits x = inf into inf plus an inf - inf = NaN correction, so NaN appears where the exact result
        is ±inf or finite."""
        return not (self.kernel == "mma" and self.dtype == "float32" and self.lanes == 32)

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
        if self.kernel == "mma":
            defines["PA_MIN_BLOCKS"] = self.tile.min_blocks
            defines["PA_PERSISTENT"] = int(self.tile.persistent)
        if self.emulated:
            defines["PA_EMULATE_WAVE64"] = 1
        if self.dtype == "bfloat16":
            defines["PA_BF16"] = 1
        if self.dtype == "float32" and self.kernel == "mma":
            defines["PA_F32"] = 1
        if self.tile.warpgroup_mma:
            defines["PA_MMA_WGMMA"] = 1
        return defines | dict(self.test_defines)


    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory. simt: Q tile, one K/V tile (padded rows) and the probability tile, float32.
        mma: Q tile, K tile and V tile of the input type, rows padded by 16 bytes (warpgroup MMA: two K and two V
        tiles of unpadded swizzled rows, plus slack to align the tiles to 1024 bytes)."""
        t = self.tile
        if self.kernel == "simt":
            ld = self.head_dim + 4
            return 4 * (t.block_m * ld + t.block_n * ld + t.block_m * (t.block_n + 4))
        size = 4 if self.dtype == "float32" else 2
        if t.warpgroup_mma:
            return size * (t.block_m + 4 * t.block_n) * self.head_dim + 1024 - 16
        return size * (t.block_m + 2 * t.block_n) * (self.head_dim + 16 // size)

    def grid_blocks(self, work_items: int, multiprocessors: int) -> int:
        """Blocks to launch for ``work_items`` tiles of query rows: one each, or for a persistent tile at most
        ``min_blocks`` per multiprocessor."""
        if self.tile.persistent:
            return min(work_items, multiprocessors * self.tile.min_blocks)
        return work_items

    @property
    def tile_options(self) -> list[str]:
        """The tile's options beyond its shape, e.g. ["wgmma", "2/SM"]."""
        t = self.tile
        return ["wgmma"] * t.warpgroup_mma + [f"{t.min_blocks}/SM"] * (t.min_blocks > 1) + ["persistent"] * t.persistent

    @property
    def label(self) -> str:
        t = self.tile
        lanes = f"{self.lanes}l" + ("-emulated" if self.emulated else "")
        extra = [*self.tile_options, *(f"{k}={v}" for k, v in self.test_defines)]
        return f"{self.function}[d={self.head_dim},{t.block_m}x{t.block_n},{t.threads}t,{','.join([lanes, *extra])}]"


def family(target: Target) -> str:
    """The tuning family of ``target`` (of the emulated arch under wave64 emulation)."""
    try:
        return ARCH_FAMILY[target.tuning_arch]
    except KeyError:
        raise UnsupportedTargetError(
            f"no kernel configuration for arch {target.tuning_arch!r}; supported: {', '.join(ARCH_FAMILY)}"
        ) from None


def select(target: Target, dtype: str, head_dim: int, kernel: str | None = None,
           seqlen_q: int | None = None) -> KernelSpec:
    """The kernel variant for ``dtype`` and ``head_dim`` on ``target``: the matrix-unit kernel where the tables
    have a row for it, else the simt kernel; ``kernel`` ("mma" or "simt") asks for one of them. ``seqlen_q`` (query
    rows) picks the short-sequence row of MMA_TILES_SHORT where there is one."""
    fam = family(target)
    if dtype not in DTYPES:
        raise NotImplementedError(f"dtype {dtype} is not supported yet; supported: {', '.join(DTYPES)}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported; supported: {', '.join(map(str, HEAD_DIMS))}")
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)} or None, got {kernel!r}")
    key = (dtype, head_dim)
    chosen = kernel or next((k for k in ("mma", "simt") if key in TABLES[k][fam]), None)
    if chosen is None or key not in TABLES[chosen][fam]:
        which = f"{kernel} kernel" if kernel else "kernel"
        raise NotImplementedError(f"{dtype} attention has no {which} for {target.tuning_arch} at head dim "
                                  f"{head_dim} yet")
    filename, function = KERNELS[chosen]
    tile = TABLES[chosen][fam][key]
    if chosen == "mma" and seqlen_q is not None and seqlen_q <= SHORT_SEQLEN:
        tile = MMA_TILES_SHORT.get(fam, {}).get(key, tile)
    spec = KernelSpec(filename, function, dtype, head_dim, tile, target.lanes, target.emulated)
    limits = [target] + ([Target.for_arch(target.emulates)] if target.emulates else [])
    for t in limits:
        if spec.smem_bytes > t.smem_per_block:
            raise UnsupportedTargetError(
                f"{spec.label} needs {spec.smem_bytes} bytes of shared memory, {t.arch} allows {t.smem_per_block}"
            )
    return spec


def dtype_name(dtype: object) -> str:
    """The selector's name of a dtype: "float16" for ``torch.float16`` (a name is returned as it is)."""
    return str(dtype).removeprefix("torch.")


def has_kernel(target: Target, dtype: object, head_dim: int = 64) -> bool:
    """Whether the tables give ``target`` a kernel for ``dtype`` (a torch dtype or its name) and ``head_dim``."""
    try:
        select(target, dtype_name(dtype), head_dim)
    except (NotImplementedError, UnsupportedTargetError, ValueError):
        return False
    return True


def shipped_variants(target: Target) -> list[KernelSpec]:
    """Every kernel variant portattn can use on ``target``: each table row of the matrix-unit and simt kernels,
    then the short-sequence rows."""
    fam = family(target)
    keys = [(dt, d) for dt in DTYPES for d in HEAD_DIMS]
    specs = [select(target, dt, d, k) for k in ("mma", "simt") for dt, d in keys if (dt, d) in TABLES[k][fam]]
    short = [select(target, dt, d, "mma", SHORT_SEQLEN) for dt, d in keys if (dt, d) in MMA_TILES_SHORT.get(fam, {})]
    return specs + [s for s in short if s not in specs]
