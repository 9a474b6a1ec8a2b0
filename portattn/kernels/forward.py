"""The forward kernel family: tile tables, variant choice and launch.

Kernels (``src_cuda/``): ``flash_fwd_mma.cu`` on the matrix units (all three dtypes; float32 as 3xTF32 on NVIDIA,
fp32 MFMA on AMD), ``flash_fwd_ws.cu``, Hopper's warp-specialized kernel fed by bulk tensor copies (16-bit, and
float32 as 3xTF32 on the warpgroup MMA; no mask or the causal one), and ``flash_fwd_simt.cu``, the portable float32
kernel. Parameters: ``PaFwdParams`` (``pa_fwd_params.cuh``).

Tuning is data: ``MMA_TILES``, ``WS_TILES`` and ``SIMT_TILES`` map (arch family, dtype, head dim) to a tile, and
``WS_TILES_BY_LENGTH`` holds the warp-specialized rows that differ for calls of some lengths (bands of
``Lengths``). For a call without score modifiers (windows and packed sequences included) the
warp-specialized row wins where there is one, then the matrix-unit row; a shape with no row in any table is not
supported, and the error says so.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..runtime import loader
from ..runtime.params import divisor, struct_from_header
from ..runtime.target import Target
from .masking import CAUSAL, NONE, PLAIN, Masking, call_fields, set_mask_fields
from .variant import (
    DTYPES,
    HALF,
    HEAD_DIMS,
    OVERRIDES,
    KernelSpec,
    Rows,
    TileConfig,
    current_stream,
    dtype_name,
    exp2_scale,
    forced_kernel,
    launch_target,
    resident_blocks,
    rows,
    selects,
    set_strides,
    set_tensor_maps,
)

T = TileConfig

# Matrix-unit kernel: (dtype, head dim) -> tile, per family.
# float32 d = 256 has no tile without register spills (the 3xTF32 fragments are twice as large): simt kernel.
_NV_MMA = rows(HALF, {
    32: T(block_m=128, block_n=64, threads=256),
    64: T(block_m=128, block_n=64, threads=128),
    96: T(block_m=128, block_n=64, threads=128),
    128: T(block_m=128, block_n=32, threads=128),
    256: T(block_m=64, block_n=64, threads=128),
}) | rows(("float32",), {
    32: T(block_m=64, block_n=64, threads=128),
    64: T(block_m=128, block_n=32, threads=128),
    96: T(block_m=64, block_n=32, threads=128),
    128: T(block_m=64, block_n=64, threads=128),
})
_NV_MMA_SMALL_SMEM = _NV_MMA | rows(HALF, {256: T(block_m=64, block_n=32, threads=128)})
# Hopper: warpgroup MMA for every 16-bit head dim of 64 and more, 64 query rows per warpgroup (the warp-specialized
# kernel, WS_TILES, takes most calls without extended masks; these serve the rest and a forced kernel). d = 64: two
# warpgroups per block and two blocks per SM (within 128 registers), so one block's start (Q load, first scores)
# overlaps the other's work; d = 96 (shared rows padded to 128 columns) and d = 128 need more registers than that
# and run three warpgroups, one block per SM (d = 96 at two blocks per SM spills); d = 256 (128 accumulators per
# thread) runs two warpgroups within 255 registers, one block per SM.
_NV_MMA_HOPPER = _NV_MMA | rows(HALF, {
    64: T(block_m=128, block_n=64, threads=256, warpgroup_mma=True, min_blocks=2),
    96: T(block_m=192, block_n=64, threads=384, warpgroup_mma=True),
    128: T(block_m=192, block_n=64, threads=384, warpgroup_mma=True),
    256: T(block_m=128, block_n=64, threads=256, warpgroup_mma=True),
})
# 64 KiB of LDS per CU; two waves per SIMD means eight resident waves per CU. Every wave keeps its 16 query rows
# in LDS (rows of d + 16 bytes' worth of elements), so where 8 x 16 such rows exceed 64 KiB (16-bit d = 256 and
# float32 d = 128: 528-byte rows, 67584 bytes) no tile of this kernel reaches two waves per SIMD: those run one
# 4-wave workgroup per CU (gfx950's 160 KiB of LDS holds three). Everywhere else one 8-wave workgroup (or two
# 4-wave ones) fits. float32 d = 256 has no matrix-unit tile that fits and runs the simt kernel.
_AMD_MFMA = rows(HALF, {
    32: T(block_m=128, block_n=64, threads=512),
    64: T(block_m=128, block_n=64, threads=512),
    96: T(block_m=128, block_n=64, threads=512),
    128: T(block_m=128, block_n=32, threads=512),
    256: T(block_m=64, block_n=16, threads=256),
}) | rows(("float32",), {
    32: T(block_m=128, block_n=64, threads=512),
    64: T(block_m=128, block_n=32, threads=512),
    96: T(block_m=128, block_n=16, threads=512),
    128: T(block_m=64, block_n=16, threads=256),
})
_AMD_MFMA_NO_BF16 = {key: tile for key, tile in _AMD_MFMA.items() if key[0] != "bfloat16"}  # gfx908: no bf16_1k

MMA_TILES: dict[str, Rows] = {
    "sm80": _NV_MMA,
    "sm86": _NV_MMA_SMALL_SMEM,
    "sm90": _NV_MMA_HOPPER,
    "cdna1": _AMD_MFMA_NO_BF16,
    "cdna2": _AMD_MFMA,
    "cdna3": _AMD_MFMA,
    "cdna4": _AMD_MFMA,
    "rdna3": {},  # RDNA: no MFMA (its WMMA is not used yet); the simt kernel on 32-lane waves
    "rdna4": {},
}

# simt kernel (float32 only).
_NV_SIMT = rows(("float32",), {
    32: T(block_m=64, block_n=64, threads=256),
    64: T(block_m=64, block_n=64, threads=256),
    96: T(block_m=64, block_n=32, threads=256),
    128: T(block_m=64, block_n=64, threads=256),
    256: T(block_m=64, block_n=64, threads=256),
})
_NV_SIMT_SMALL_SMEM = _NV_SIMT | rows(("float32",), {256: T(block_m=32, block_n=32, threads=128)})
# sm_90, d = 128: NVRTC 13.0 spills 16 bytes of the 64x64 tile.
_NV_SIMT_HOPPER = _NV_SIMT | rows(("float32",), {128: T(block_m=64, block_n=32, threads=256)})
_AMD_SIMT = rows(("float32",), {
    32: T(block_m=64, block_n=32, threads=512),
    64: T(block_m=64, block_n=32, threads=512),
    96: T(block_m=64, block_n=32, threads=512),
    128: T(block_m=64, block_n=32, threads=512),
    256: T(block_m=32, block_n=16, threads=512),
})

SIMT_TILES: dict[str, Rows] = {
    "sm80": _NV_SIMT,
    "sm86": _NV_SIMT_SMALL_SMEM,
    "sm90": _NV_SIMT_HOPPER,
    "cdna1": _AMD_SIMT,
    "cdna2": _AMD_SIMT,
    "cdna3": _AMD_SIMT,
    "cdna4": _AMD_SIMT,
    "rdna3": _AMD_SIMT,
    "rdna4": _AMD_SIMT,
}

# Extended masks (PA_MASK_EXT: variable lengths, windows, softcap, ALiBi, mask tensors): matrix-unit rows that
# differ from the others. The per-element masking and score modifiers hold more registers: the rows at the register
# limit take a tile with fewer rows per wave or one block per SM instead of spilling.
_NV_MMA_EXT = rows(HALF, {
    64: T(block_m=64, block_n=64, threads=128),
    96: T(block_m=64, block_n=64, threads=128),
    128: T(block_m=64, block_n=64, threads=128),
    256: T(block_m=64, block_n=32, threads=128),
}) | rows(("float32",), {64: T(block_m=64, block_n=64, threads=128)})  # 128x32 spills 16-28 bytes (NVRTC 13.0)
MMA_TILES_EXT: dict[str, Rows] = {
    "sm80": _NV_MMA_EXT,
    "sm86": _NV_MMA_EXT,
    # d = 256 on the warpgroup MMA spills here: mma.sync. d = 64: 128-key tiles, 1.06-1.09x 64-key ones (variable
    # lengths, windows); at d = 128 they ran 0.92x.
    "sm90": _NV_MMA_EXT | rows(HALF, {
        64: T(block_m=128, block_n=128, threads=256, warpgroup_mma=True),
        96: T(block_m=128, block_n=64, threads=256, warpgroup_mma=True),
        128: T(block_m=128, block_n=64, threads=256, warpgroup_mma=True),
    }),
}

# Hopper, warp-specialized kernel (flash_fwd_ws.cu): one copying warpgroup feeds the computing warpgroups (64 query rows
# each) through bulk tensor copies into `stages` K and V buffers; persistent blocks, one per SM. A row here takes the
# calls without score modifiers (windows and packed sequences in a build of their own, WS_TILES_EXT) of every length
# from the matrix-unit kernel (at d = 64 and 128-512 queries 1.2-1.3x the matrix-unit kernel's two blocks per SM).
# d = 64, 96 and 128: 128-key tiles, two computing warpgroups taking turns (d = 96 / 128: a third stage measured the
# same; d = 64: three stages, 1.00-1.02x two; four ran 1.03-1.09x three from 128 to 2048 queries on an H200 but
# 0.96-1.00x on an H100 (bf16, four rounds of alternating processes); and 1.02-1.16x three computing warpgroups on
# 64-key tiles, whose scores are read from shared memory at a higher rate per product); d = 256: 80-key tiles (5-10 %
# faster than 64-key tiles at N >= 4096; 128-key tiles do not fit). A second Q buffer (the next job's Q copied while the
# current one's products run): d = 64 1.02-1.04x from 1024 queries on, 0.98-1.04x below; d = 128 0.98-1.05x, and with
# the output leaving through the Q buffer (stores_o_bulk) 1.09-1.15x at N = 1024 (H100, bf16). d = 128 with 80-key tiles
# in three or four stages ran 0.72-1.00x these from 128 to 2048 queries (H200). float32 (TF32 products on split tiles,
# 224 KiB of shared memory): d = 64 two computing warpgroups on 64-key tiles and two copying ones, d = 128 one on 32-key
# tiles and three copying ones. The copying warpgroups' threads split and transpose the tiles, which bounds the kernel:
# each copying warpgroup fewer ran 0.77-0.86x. d = 96 with the second Q buffer (and the bulk output stores): 1.16-1.34x
# one buffer from 128 to 512 queries, 1.04-1.14x from 1024 to 2048, 0.99-1.04x from 4096 on (H200, bf16 and fp16,
# causal and not, one process, the rows alternating over three rounds).
WS_TILES: dict[str, Rows] = {
    "sm90": rows(HALF, {
        64: T(block_m=128, block_n=128, threads=384, warpgroup_mma=True, stages=3, q_stages=2),
        96: T(block_m=128, block_n=128, threads=384, warpgroup_mma=True, stages=2, q_stages=2),
        128: T(block_m=128, block_n=128, threads=384, warpgroup_mma=True, stages=2, q_stages=2),
        256: T(block_m=128, block_n=80, threads=384, warpgroup_mma=True, stages=2),
    }) | rows(("float32",), {
        64: T(block_m=128, block_n=64, threads=512, warpgroup_mma=True, stages=2),
        128: T(block_m=64, block_n=32, threads=512, warpgroup_mma=True, stages=2),
    }),
}

@dataclass(frozen=True)
class Lengths:
    """The calls a length row takes: those whose length (``select``'s ``seqlen``: the shorter of the query rows and the
    keys a row sees, half the keys under a causal mask) lies in ``first``..``last`` (``last`` None: no bound), causal
    ones (``causal`` True), those without a mask (False) or both (None)."""

    first: int
    last: int | None = None
    causal: bool | None = None

    def take(self, seqlen: int, causal: bool) -> bool:
        """Whether a call of length ``seqlen`` (causal or not) lies in the band."""
        return (self.first <= seqlen and (self.last is None or seqlen <= self.last)
                and self.causal in (None, causal))


LengthRows = dict[tuple[str, int], tuple[tuple[Lengths, TileConfig], ...]]


# Warp-specialized rows for calls of some lengths only (plain and causal calls; windows and packed sequences keep
# WS_TILES_EXT), per (dtype, head dim): the first band that takes a call gives its row, else WS_TILES does.
# d = 64, short calls (up to 128 rows, or 256 causal ones): four K and V buffers and three Q buffers (the copies run up
# to two jobs ahead of the products; with two Q buffers the next job's Q waits for the bulk stores of the one before):
# 1.04-1.05x the WS_TILES row at 128 rows without a mask, 1.01-1.03x causal, 1.01x causal at 256; at 256 rows
# without a mask 0.99-1.00x, causal at 512 0.99x (H200, bf16 and fp16, one process, alternating over four rounds, two
# runs); four K/V stages with two Q buffers 0.97-1.01x, three with three or four Q buffers 0.95-1.04x, five with three
# or four 0.98-1.05x.
# d = 64, longer calls: three computing warpgroups (192 query rows, no turn-taking, 160 registers each) on 128-key
# tiles ran 1.09-1.17x the two on 128-key tiles at N = 2048 and 1.06-1.20x from 4096 on (H100), causal N = 2048
# 0.87-0.88x; at N = 1024 1.05-1.08x without a mask and 0.82-0.86x causal (the diagonal's masked tiles weigh more in
# 192-row blocks, which also do not take turns); 96-key tiles 0.91-0.99x these. Without a mask, shorter calls (H200,
# bf16 and fp16): 288 / 320 / 384 / 576 / 768 / 896 rows 1.13-1.29x, 512 and 1000 rows 1.05-1.10x, 600 and 640 rows
# 0.99-1.01x (192-row blocks pad more), but 256 rows 0.83x (two whole 128-row blocks): the 192-row tile from 257 rows
# on, causal calls from 2048 rows and keys per row. A second Q buffer (the output leaving through it) on the 192-row
# tile: 1.05x without a mask at 512 rows, 1.02-1.03x at 1024, 1.00-1.02x at 2048, 1.00-1.06x at 4096, 1.00-1.01x at
# 8192 and 0.99x at 16384; causal 0.97-1.00x from 4096 (H200, same timing): below 4096 rows without a mask only.
# A third K/V stage or a third Q buffer there gained nothing more (0.98-1.01x the second Q buffer).
# d = 96, calls from 2048 rows and keys per row: 160-key tiles (the shared rows' padding to 128 columns leaves room for
# them next to two Q buffers; no spills) ran 1.01-1.05x the 128-key ones (both with two Q buffers) from 4096 queries
# on, causal and not, and 1.01-1.02x without a mask at 2048; 0.92-0.96x at 1024, 0.96-0.97x causal at 2048 (H200,
# bf16 and fp16, one process, alternating over three rounds; 144-key tiles 0.97-1.01x the 160-key ones).
# d = 128, calls from 4096 rows and keys per row (causal: from 8192 rows): 160-key tiles next to two Q buffers (225 KiB
# of shared memory, no spills) against the 128-key ones, without a mask 1.04-1.07x at 16384 queries, 0.99-1.05x at
# 8192 (0.97-1.02x with 64 heads), 0.98-1.02x at 4096 (mean 1.007); causal 1.01-1.04x at 16384, 0.99-1.02x at 8192
# (mean 1.012), 0.99-1.01x at 4096; at 1024 and 2048 queries mostly 0.83-1.00x, where the last key tile, mostly
# padding, weighs more (H200, bf16 and fp16, 16 heads, 32k tokens, alternating over three rounds in one process, four
# processes on two machine starts). Wider key tiles do not fit next to two Q buffers.
# d = 64 on the 128-row tile: 160-key tiles lost (0.84-0.97x causal from 256 to 2048 queries, 0.82-0.84x at 256
# without a mask). A third Q buffer at d = 96 or 128 gained nothing (0.94-1.02x from 128 to 2048 rows).
# d = 256, short calls (up to 256 rows, or 512 causal ones): 32-key tiles in three stages next to a second Q buffer
# (the next job's Q copied during the current one, the output leaving through it): 1.14-1.25x the 80-key row at 256
# rows (causal N = 512, not causal N = 256; H100, bf16 and fp16, two rounds in alternating processes on each of two
# machine starts), 0.96-1.00x at 512 and 0.77-0.86x from 1024 on, where each job's key tiles outweigh its start and end.
# d = 256, causal calls of 257-512 (514-1024 rows): 64-key tiles, 1.06-1.08x the 80-key ones at 640 rows, 1.00-1.02x
# at 768, 1.02-1.04x at 1024, 0.98-1.00x at 1280; without a mask 0.91-1.00x at 384 and 640-1024 rows (1.02-1.03x at
# 512, which 64-key tiles divide), and 0.93-0.94x at 2048 (H200, bf16 and fp16, one process, alternating over four
# rounds, two runs).
_WS_64_192 = T(block_m=192, block_n=128, threads=512, warpgroup_mma=True, stages=2)
WS_TILES_BY_LENGTH: dict[str, LengthRows] = {
    "sm90": rows(HALF, {
        64: ((Lengths(1, 128), T(block_m=128, block_n=128, threads=384, warpgroup_mma=True, stages=4, q_stages=3)),
             (Lengths(257, 4095, causal=False), replace(_WS_64_192, q_stages=2)),
             (Lengths(4096, causal=False), _WS_64_192),
             (Lengths(2048, causal=True), _WS_64_192)),
        96: ((Lengths(2048), T(block_m=128, block_n=160, threads=384, warpgroup_mma=True, stages=2, q_stages=2)),),
        128: ((Lengths(4096), T(block_m=128, block_n=160, threads=384, warpgroup_mma=True, stages=2, q_stages=2)),),
        256: ((Lengths(1, 256), T(block_m=128, block_n=32, threads=384, warpgroup_mma=True, stages=3, q_stages=2)),
              (Lengths(257, 512, causal=True), T(block_m=128, block_n=64, threads=384, warpgroup_mma=True, stages=2))),
    }),
}

# Windows and packed sequences without score modifiers: warp-specialized rows built without them (PA_MASK_EXT,
# PA_SCORE_MOD 0), whose jobs hold their sequence and mask in registers. The WS_TILES rows, except where those spill
# (16-bit d = 256 on 80-key tiles: 52 bytes, float32 d = 64 on 64-key tiles: 144-160; NVRTC 13.5 / 13.0), which take
# shorter key tiles; the long d = 64 row spills 284 bytes and is not used.
WS_TILES_EXT: dict[str, Rows] = {
    "sm90": WS_TILES["sm90"] | rows(HALF, {
        256: T(block_m=128, block_n=64, threads=384, warpgroup_mma=True, stages=2),
    }) | rows(("float32",), {
        64: T(block_m=128, block_n=32, threads=512, warpgroup_mma=True, stages=2),
    }),
}

TABLES: dict[str, dict[str, Rows]] = {"mma": MMA_TILES, "simt": SIMT_TILES, "ws": WS_TILES}

FwdParams = struct_from_header("pa_fwd_params.cuh", "PaFwdParams")


@dataclass(frozen=True)
class FwdSpec(KernelSpec):
    """A forward variant."""

    KERNELS = {
        "mma": ("flash_fwd_mma.cu", "pa_flash_fwd_mma"),
        "simt": ("flash_fwd_simt.cu", "pa_flash_fwd_simt"),
        "ws": ("flash_fwd_ws.cu", "pa_flash_fwd_ws"),
    }

    def family_defines(self) -> dict[str, int]:
        t = self.tile
        if self.kernel == "simt":
            return {"PA_ROW_LANES": t.row_lanes}
        if self.kernel == "ws":
            if t.min_blocks != 1 or not t.warpgroup_mma:
                raise ValueError(f"{self.label}: the warp-specialized kernel runs one block per SM, on the "
                                 "warpgroup MMA")
            return {"PA_MMA_WGMMA": 1, "PA_TMA_STAGES": t.stages, "PA_Q_STAGES": t.q_stages,
                    "PA_STORE_O_BULK": int(self.stores_o_bulk)}
        defines = {"PA_MIN_BLOCKS": t.min_blocks}
        if t.warpgroup_mma:
            defines["PA_MMA_WGMMA"] = 1
        return defines

    @property
    def stores_o_bulk(self) -> bool:
        """Whether the warp-specialized kernel stores the output with bulk tensor copies from the job's Q buffer
        (16-bit inputs with two Q buffers or more: the next job's Q has another one)."""
        return self.kernel == "ws" and self.dtype != "float32" and self.tile.q_stages >= 2

    @property
    def smem_bytes(self) -> int:
        """simt: Q tile, one K/V tile (padded rows) and the probability tile, float32. mma: Q tile, K tile and V tile
        of the input type, rows padded by 16 bytes (warpgroup MMA: two K and two V tiles of swizzled rows of whole
        64-column blocks, plus slack to align the tiles to 1024 bytes)."""
        t = self.tile
        if self.kernel == "simt":
            ld = self.head_dim + 4
            return 4 * (t.block_m * ld + t.block_n * ld + t.block_m * (t.block_n + 4))
        size = 4 if self.dtype == "float32" else 2
        if self.kernel == "ws":
            # The Q stages and the K and V stages in rows of whole 128-byte blocks, plus the barriers: full and
            # empty Q per Q stage, and full K, full V, empty K and empty V per stage. float32: each tile in two parts
            # (TF32 and the rest), two V landing tiles, and ready K, ready V per stage and full / empty per landing
            # tile.
            row = -(-self.head_dim * size // 128) * 128
            q_bars = 2 * t.q_stages
            if self.dtype == "float32":
                return (row * (2 * t.q_stages * t.block_m + (4 * t.stages + 2) * t.block_n)
                        + 8 * (q_bars + 6 * t.stages + 4) + 1024 - 16)
            return row * (t.q_stages * t.block_m + 2 * t.stages * t.block_n) + 8 * (q_bars + 4 * t.stages) + 1024 - 16
        if t.warpgroup_mma:  # rows of whole 64-column blocks
            return size * (t.block_m + 4 * t.block_n) * -(-self.head_dim // 64) * 64 + 1024 - 16
        return size * (t.block_m + 2 * t.block_n) * (self.head_dim + 16 // size)


def select(target: Target, dtype: str, head_dim: int, kernel: str | None = None, mask_ext: bool = False,
           seqlen: int | None = None, score_mods: bool = True, causal: bool = False) -> FwdSpec:
    """The forward variant for ``dtype`` and ``head_dim`` on ``target``: the warp-specialized kernel where the
    tables have a row for it (not for score modifiers), else the matrix-unit kernel, else the simt kernel; ``kernel``
    ("ws", "mma" or "simt") asks for one of them. ``mask_ext``: an extended-mask build, the warp-specialized one
    without the score modifiers where the call has none (``score_mods`` False) and WS_TILES_EXT has a row, else the
    matrix-unit one (its row of MMA_TILES_EXT where there is one). ``seqlen``, the call's length (the shorter of its
    query rows and the keys a row sees, half the keys under a causal mask) and ``causal`` pick the row of the first
    band of WS_TILES_BY_LENGTH that takes the call (plain and causal calls)."""
    fam = target.family
    if dtype not in DTYPES:
        raise NotImplementedError(f"dtype {dtype} is not supported yet; supported: {', '.join(DTYPES)}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported; supported: {', '.join(map(str, HEAD_DIMS))}")
    if kernel is not None and kernel not in FwdSpec.KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(FwdSpec.KERNELS)} or None, got {kernel!r}")
    key = (dtype, head_dim)
    ws_rows = WS_TILES_EXT if mask_ext else WS_TILES
    if kernel is None and not (mask_ext and score_mods) and key in ws_rows.get(fam, {}):
        kernel = "ws"
    chosen = kernel or next((k for k in ("mma", "simt") if key in TABLES[k][fam]), None)
    if chosen == "ws" and mask_ext and (score_mods or key not in ws_rows.get(fam, {})):
        what = "score modifiers (softcap, ALiBi, masks)" if score_mods else f"windows or packed sequences at {key}"
        raise NotImplementedError(f"the warp-specialized forward takes no {what}")
    if chosen is None or key not in TABLES[chosen].get(fam, {}):
        which = f"{kernel} kernel" if kernel else "kernel"
        raise NotImplementedError(f"{dtype} attention has no {which} for {target.tuning_arch} at head dim "
                                  f"{head_dim} yet")
    tile = TABLES[chosen][fam][key]
    if chosen == "mma" and mask_ext:
        tile = MMA_TILES_EXT.get(fam, {}).get(key, tile)
    elif chosen == "ws" and mask_ext:
        tile = ws_rows[fam][key]
    elif chosen == "ws" and seqlen is not None:
        bands = WS_TILES_BY_LENGTH.get(fam, {}).get(key, ())
        tile = next((row for lengths, row in bands if lengths.take(seqlen, causal)), tile)
    spec = FwdSpec(chosen, dtype, head_dim, tile, target.lanes, target.emulated, mask_ext,
                   score_mods=not (chosen == "ws" and mask_ext))
    spec.check_fits(target)
    return spec


def has_kernel(target: Target, dtype: object, head_dim: int = 64) -> bool:
    """Whether the tables give ``target`` a forward kernel for ``dtype`` (a torch dtype or its name) and
    ``head_dim``."""
    return selects(select, target, dtype, head_dim)


def shipped_variants(target: Target) -> list[FwdSpec]:
    """Every forward variant portattn can use on ``target``: each table row of the matrix-unit and simt kernels,
    then the warp-specialized rows (any call, then those of the length bands), then the extended-mask builds of the
    matrix-unit and simt rows and of the warp-specialized ones (without the score modifiers)."""
    fam = target.family
    keys = [(dt, d) for dt in DTYPES for d in HEAD_DIMS]
    pairs = [(k, dt, d) for k in ("mma", "simt") for dt, d in keys if (dt, d) in TABLES[k][fam]]
    specs = [select(target, dt, d, k) for k, dt, d in pairs]
    specs += [select(target, dt, d, "ws") for dt, d in keys if (dt, d) in WS_TILES.get(fam, {})]
    for (dt, d), bands in WS_TILES_BY_LENGTH.get(fam, {}).items():
        specs += [select(target, dt, d, "ws", seqlen=lengths.first, causal=bool(lengths.causal))
                  for lengths, _ in bands]
    ext = [select(target, dt, d, k, mask_ext=True) for k, dt, d in pairs]
    ext += [select(target, dt, d, "ws", mask_ext=True, score_mods=False) for dt, d in keys
            if (dt, d) in WS_TILES_EXT.get(fam, {})]
    return list(dict.fromkeys(specs + ext))  # bands may share a row


_launches: dict[tuple, loader.Launch] = {}


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None,
        scale: float, masking: Masking) -> loader.Launch:
    """Launch the forward on ``q``'s device and torch's current stream. Inputs are validated, non-empty, in a
    layout the kernels read in place, and ``scale >= 0``. q, k, v and out are [batch, heads, seq, head_dim] views;
    with ``masking.varlen`` their batch is 1 and seq the packed rows of all sequences, and ``lse`` is
    [heads_q, total_q] (else [batch, heads_q, seq_q]). The launch state of a call signature is made once; it is
    returned, so that a caller can ``start`` it again on tensors of the same signature."""
    target = launch_target(q.device)
    hooks = OVERRIDES.get()
    key = (target, q.device.index, q.dtype, q.shape, k.shape, q.stride(), k.stride(), v.stride(), out.stride(),
           lse is None, masking.key, hooks, forced_kernel())
    launch = _launches.get(key)
    if launch is None:
        launch = loader.remember(_launches, key, _plan(q, k, v, out, lse, masking, target, hooks.tweak))
    start(launch, q, k, v, out, lse, scale, masking)
    return launch


def start(launch: loader.Launch, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
          lse: torch.Tensor | None, scale: float, masking: Masking) -> None:
    """Launch ``launch`` (from ``run``) on tensors of its signature (only their addresses are read)."""
    fields = {} if masking is PLAIN or masking is CAUSAL else call_fields(masking)
    launch(current_stream(q.device), q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=out.data_ptr(),
           lse=lse.data_ptr() if lse is not None else None, scale=scale, scale_log2=exp2_scale(scale),
           **fields)


def _plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None,
          masking: Masking, target: Target, tweak) -> loader.Launch:
    batch, seqlen_q, seqlen_k = masking.lengths(q, k)
    keys = seqlen_k // 2 if masking.causal else seqlen_k  # a causal row sees half the keys on average
    spec = select(target, dtype_name(q.dtype), q.shape[-1], forced_kernel(), masking.extended, min(seqlen_q, keys),
                  masking.modified, masking.causal)
    if tweak is not None:
        spec = tweak(spec)
    fn = loader.kernel_function(spec, target, q.device.index)
    heads_q, heads_kv = q.shape[1], k.shape[1]
    num_m_blocks = -(-seqlen_q // spec.tile.block_m)
    items = num_m_blocks * batch * heads_q
    if items >= 2**31:
        raise ValueError(f"problem too large: {items} blocks (batch * heads * query blocks must be < 2**31)")
    # Persistent kernels take units of work in turn: under a right window bound (causal) a unit pairs the k-th
    # heaviest query block of a head with the k-th lightest (pa_fwd_params.cuh). (Packed sequences with no query rows
    # at all have no units: the divisor is then never used.)
    per_head = -(-num_m_blocks // 2) if masking.right != NONE else num_m_blocks
    p = FwdParams(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                  total_q=q.shape[2], total_k=k.shape[2], num_m_blocks=num_m_blocks,
                  num_units=batch * heads_q * per_head, units_div=divisor(max(per_head, 1)), heads_div=divisor(heads_q),
                  group_div=divisor(heads_q // heads_kv))
    set_strides(p, {"q": q, "k": k, "v": v, "o": out})
    if lse is not None:
        p.lse_sb, p.lse_sh = (0, lse.stride(0)) if masking.varlen else (lse.stride(0), lse.stride(1))
    set_mask_fields(p, masking)
    maps: tuple[tuple[str, str], ...] = ()
    grid = items
    if spec.kernel == "ws":
        rows_k = spec.tile.block_n
        tensors = {"map_q": (q, spec.tile.block_m), "map_k": (k, rows_k), "map_v": (v, rows_k)}
        maps = (("map_q", "q"), ("map_k", "k"), ("map_v", "v"))
        if spec.stores_o_bulk:  # each computing warpgroup stores its 64 rows
            tensors["map_o"] = (out, 64)
            maps += (("map_o", "o"),)
        set_tensor_maps(p, target, spec.dtype, tensors)
        grid = min(p.num_units, resident_blocks(spec, target))  # persistent: as many blocks as the GPU holds at once
    return loader.Launch(target, fn, grid, spec.tile.threads, spec.smem_bytes, p, tensor_maps=maps)
