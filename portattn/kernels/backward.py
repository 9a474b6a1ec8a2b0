"""The backward kernel family: tile tables, variant choice and launch.

Three kernels, one parameter struct (``PaBwdParams``, ``pa_bwd_params.cuh``):
- ``flash_bwd_prep.cu``: delta = rowsum(dO * O), and the zeroed float32 sums of dQ (all dtypes, SIMT lanes);
- ``flash_bwd_dkdv_mma.cu`` (``flash_bwd_dkdv_simt.cu``): per block of keys, dK and dV summed over the query heads
  of its group, and (by default) dQ added into the float32 sums with atomics;
- ``flash_bwd_dq_mma.cu`` (``flash_bwd_dq_simt.cu``): per block of queries, dQ in a fixed order; run instead of the
  atomics when ``deterministic`` is asked for, so that two runs give the same bits.

Tuning is data: ``DKDV_TILES`` / ``DQ_TILES`` (matrix units) and ``SIMT_DKDV_TILES`` / ``SIMT_DQ_TILES`` map (arch
family, dtype, head dim) to a tile. For the dK/dV kernel ``block_n`` is the keys of a block and ``block_m`` the
query tile it streams; for the dQ kernel ``block_m`` is the queries of a block and ``block_n`` the key tile.
``split`` > 1 gives each block a slice of the head dim's columns (large head dims).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..runtime import loader
from ..runtime.params import struct_from_header
from ..runtime.target import Target
from .masking import CAUSAL, PLAIN, Masking, call_fields, set_mask_fields
from .variant import (
    DTYPES,
    HALF,
    HEAD_DIMS,
    OVERRIDES,
    KernelSpec,
    Rows,
    TileConfig,
    allocation,
    current_stream,
    dtype_name,
    exp2_scale,
    forced_kernel,
    launch_target,
    new_from,
    rows,
    selects,
    set_strides,
    set_tensor_maps,
)

T = TileConfig
F32 = ("float32",)

# dK/dV kernel (block_n keys per block, block_m queries per streamed tile), matrix units. NVIDIA: two buffers of
# the query tiles, so that their copies overlap the work (cp.async).
_NV_DKDV = rows(HALF, {
    32: T(block_m=64, block_n=128, threads=256, stages=2),
    64: T(block_m=64, block_n=128, threads=256, stages=2),
    96: T(block_m=32, block_n=128, threads=256, stages=2),
    128: T(block_m=32, block_n=128, threads=256, stages=2),
    256: T(block_m=32, block_n=64, threads=128, split=2, stages=2),
}) | rows(F32, {
    32: T(block_m=32, block_n=64, threads=128, stages=2),
    64: T(block_m=32, block_n=64, threads=128, stages=2),
    96: T(block_m=32, block_n=64, threads=128, split=2, stages=2),
    128: T(block_m=32, block_n=64, threads=128, split=2, stages=2),
})
# sm_90: the warpgroup MMA for the 16-bit head dims 64, 96, 128 and 256 (64 keys per warpgroup; against the mma.sync
# tiles 2.1-2.3x at d = 96, 2.3-3.0x at d = 256, H100, bf16 and fp16, N = 1024-8192, causal and not). d = 64 takes
# 128-query tiles: Sᵀ and dPᵀ are then 128 columns wide, which read fewer operand bytes per product than 64-query
# tiles (1.10-1.15x those); d = 96 and 128 have no registers for them. d = 256 splits the head dim's columns of dK,
# dV and dQ over two blocks (each computes Sᵀ and dPᵀ whole), on 32-query tiles, whose two buffers of Q and dO fit
# the shared memory next to the whole K and V; dQ is then computed transposed (the unit's rows are 64). float32
# d = 96 / 128: 16-query tiles hold the whole head dim's dK and dV without a column split, so S and dP are computed
# once: 1.3x (d = 96) and 1.5-1.6x (d = 128) the split tile's speed (d = 64 stays: 16-query tiles ran 0.88x there).
# float32 unrolls Sᵀ's and dPᵀ's loops over the whole head dim (no spills): 1.07-1.08x at d = 32, 1.04-1.05x at
# d = 64, 1.08-1.09x at d = 96, 1.08-1.10x at d = 128 (H200). At d = 32 and 64 it splits K and V into their TF32
# parts once per block (two more tiles, still two blocks per SM): 1.05x and 1.07-1.11x (H200); at d = 96 and 128 the
# tiles leave one block per SM (0.73-0.76x).
_SM90_DKDV = _NV_DKDV | rows(HALF, {
    64: T(block_m=128, block_n=128, threads=256, stages=2, warpgroup_mma=True),
    96: T(block_m=64, block_n=128, threads=256, stages=2, warpgroup_mma=True),
    128: T(block_m=64, block_n=128, threads=256, stages=2, warpgroup_mma=True),
    256: T(block_m=32, block_n=128, threads=256, split=2, stages=2, warpgroup_mma=True),
}) | rows(F32, {
    32: T(block_m=32, block_n=64, threads=128, stages=2, qk_unroll_all=True, kv_split=True),
    64: T(block_m=32, block_n=64, threads=128, stages=2, qk_unroll_all=True, kv_split=True),
    96: T(block_m=16, block_n=64, threads=128, stages=2, qk_unroll_all=True),
    128: T(block_m=16, block_n=64, threads=128, stages=2, qk_unroll_all=True),
})
# dQ kernel (block_m queries per block, block_n keys per streamed tile), matrix units.
_NV_DQ = rows(HALF, {
    32: T(block_m=64, block_n=64, threads=128),
    64: T(block_m=64, block_n=64, threads=128),
    96: T(block_m=64, block_n=32, threads=128),
    128: T(block_m=64, block_n=32, threads=128),
    256: T(block_m=64, block_n=32, threads=128, split=2),
}) | rows(F32, {
    32: T(block_m=64, block_n=32, threads=128),
    64: T(block_m=64, block_n=32, threads=128),
    96: T(block_m=64, block_n=32, threads=128, split=2),
    128: T(block_m=64, block_n=32, threads=128, split=2),
})
# sm_90, float32 d = 128: the deterministic dQ kernel without a column split, 1.3x faster.
_SM90_DQ = _NV_DQ | rows(F32, {128: T(block_m=64, block_n=32, threads=128)})
# 99 KiB of shared memory (sm86, sm89).
_NV_DKDV_SMALL_SMEM = _NV_DKDV | rows(HALF, {
    96: T(block_m=32, block_n=64, threads=128, stages=2),
    128: T(block_m=32, block_n=64, threads=128, stages=2),
    256: T(block_m=16, block_n=32, threads=64, split=2, stages=2),
}) | rows(F32, {
    96: T(block_m=16, block_n=32, threads=64, split=2, stages=2),
    128: T(block_m=16, block_n=32, threads=64, split=2, stages=2),
})
_NV_DQ_SMALL_SMEM = _NV_DQ | rows(HALF, {256: T(block_m=32, block_n=32, threads=64, split=2)}) | rows(F32, {
    96: T(block_m=32, block_n=32, threads=64, split=2),
    128: T(block_m=32, block_n=32, threads=64, split=2),
})
# 64 KiB of LDS per CU, 64-lane waves of 16 rows each; one buffer of the query tiles (HIP's copies are synchronous).
_AMD_DKDV = rows(HALF, {
    32: T(block_m=64, block_n=64, threads=256),
    64: T(block_m=64, block_n=64, threads=256),
    96: T(block_m=32, block_n=64, threads=256),
    128: T(block_m=32, block_n=64, threads=256),
    256: T(block_m=16, block_n=32, threads=128, split=2),
}) | rows(F32, {
    32: T(block_m=32, block_n=64, threads=256),
    64: T(block_m=32, block_n=64, threads=256),
    96: T(block_m=16, block_n=32, threads=128),
    128: T(block_m=16, block_n=32, threads=128),
})
_AMD_DQ = rows(HALF, {
    32: T(block_m=64, block_n=64, threads=256),
    64: T(block_m=64, block_n=64, threads=256),
    96: T(block_m=64, block_n=32, threads=256),
    128: T(block_m=64, block_n=32, threads=256),
    256: T(block_m=32, block_n=16, threads=128, split=2),
}) | rows(F32, {
    32: T(block_m=64, block_n=32, threads=256),
    64: T(block_m=64, block_n=32, threads=256),
    96: T(block_m=32, block_n=32, threads=128),
    128: T(block_m=32, block_n=16, threads=128),
})
_AMD_DKDV_NO_BF16 = {key: tile for key, tile in _AMD_DKDV.items() if key[0] != "bfloat16"}
_AMD_DQ_NO_BF16 = {key: tile for key, tile in _AMD_DQ.items() if key[0] != "bfloat16"}

DKDV_TILES: dict[str, Rows] = {
    "sm80": _NV_DKDV, "sm86": _NV_DKDV_SMALL_SMEM, "sm90": _SM90_DKDV,
    "cdna1": _AMD_DKDV_NO_BF16, "cdna2": _AMD_DKDV, "cdna3": _AMD_DKDV, "cdna4": _AMD_DKDV,
    "rdna3": {}, "rdna4": {},
}
DQ_TILES: dict[str, Rows] = {
    "sm80": _NV_DQ, "sm86": _NV_DQ_SMALL_SMEM, "sm90": _SM90_DQ,
    "cdna1": _AMD_DQ_NO_BF16, "cdna2": _AMD_DQ, "cdna3": _AMD_DQ, "cdna4": _AMD_DQ, "rdna3": {}, "rdna4": {},
}
# Extended-mask builds (PA_MASK_EXT): dK/dV rows that differ. On CDNA the bfloat16 kernel's 64-row query tiles at
# d = 32 / 64 need flat scratch with the score modifiers' registers (ROCm 5.2): 32-row tiles.
_AMD_DKDV_EXT = rows(("bfloat16",), {d: T(block_m=32, block_n=64, threads=256) for d in (32, 64)})
# On sm_90 the warpgroup MMA kernel at d = 128 spills with the score modifiers' registers: the mma.sync tile. Calls
# without score modifiers (windows, packed sequences) take the warpgroup MMA rows in a build without them. sm86's
# 16-bit d = 128 tile takes dQ's units one at a time: in pairs it spills 112 bytes under NVRTC 13.0 (none under 13.5).
DKDV_TILES_EXT: dict[str, Rows] = {
    "sm86": rows(HALF, {128: replace(_NV_DKDV_SMALL_SMEM[("float16", 128)], dq_single=True)}),
    "sm90": rows(HALF, {128: _NV_DKDV[("float16", 128)]}),
    "cdna2": _AMD_DKDV_EXT, "cdna3": _AMD_DKDV_EXT, "cdna4": _AMD_DKDV_EXT,
}
# SIMT float32 kernels (the portable fallback: float32 d = 256, RDNA, PORTATTN_KERNEL=simt).
_NV_SIMT_DKDV = rows(F32, {d: T(block_m=32, block_n=32, threads=256) for d in HEAD_DIMS})
_NV_SIMT_DQ = rows(F32, {d: T(block_m=32, block_n=32, threads=256) for d in HEAD_DIMS})
_SMALL_SIMT_DKDV = _NV_SIMT_DKDV | rows(F32, {256: T(block_m=16, block_n=16, threads=128)})
_SMALL_SIMT_DQ = _NV_SIMT_DQ | rows(F32, {256: T(block_m=16, block_n=16, threads=128)})
# 64 KiB of LDS per CU: two or more 4-wave workgroups per CU, except d = 256 (one).
_AMD_SIMT_DKDV = rows(F32, {d: T(block_m=16, block_n=16, threads=256) for d in (32, 64, 96)}) | rows(F32, {
    128: T(block_m=8, block_n=16, threads=256),
    256: T(block_m=8, block_n=8, threads=256),
})
_AMD_SIMT_DQ = rows(F32, {d: T(block_m=16, block_n=16, threads=256) for d in (32, 64, 96)}) | rows(F32, {
    128: T(block_m=16, block_n=8, threads=256),
    256: T(block_m=8, block_n=8, threads=256),
})
SIMT_DKDV_TILES: dict[str, Rows] = {
    "sm80": _NV_SIMT_DKDV, "sm86": _SMALL_SIMT_DKDV, "sm90": _NV_SIMT_DKDV,
    "cdna1": _AMD_SIMT_DKDV, "cdna2": _AMD_SIMT_DKDV, "cdna3": _AMD_SIMT_DKDV, "cdna4": _AMD_SIMT_DKDV,
    "rdna3": _AMD_SIMT_DKDV, "rdna4": _AMD_SIMT_DKDV,
}
SIMT_DQ_TILES: dict[str, Rows] = {
    "sm80": _NV_SIMT_DQ, "sm86": _SMALL_SIMT_DQ, "sm90": _NV_SIMT_DQ,
    "cdna1": _AMD_SIMT_DQ, "cdna2": _AMD_SIMT_DQ, "cdna3": _AMD_SIMT_DQ, "cdna4": _AMD_SIMT_DQ,
    "rdna3": _AMD_SIMT_DQ, "rdna4": _AMD_SIMT_DQ,
}
# The first kernel, per lane count: rows of PREP_ROW_LANES lanes, PREP_THREADS threads per block.
PREP_ROW_LANES = 16
PREP_THREADS = 256

BwdParams = struct_from_header("pa_bwd_params.cuh", "PaBwdParams")
STAGES = ("prep", "dkdv", "dq")


@dataclass(frozen=True)
class BwdSpec(KernelSpec):
    """One backward kernel: ``stage`` is "prep", "dkdv" or "dq"."""

    stage: str = "dkdv"

    def __post_init__(self) -> None:
        super().__post_init__()
        mma_dkdv = self.stage == "dkdv" and self.kernel == "mma" and not self.tile.warpgroup_mma
        if self.tile.kv_split and not (mma_dkdv and self.tf32_split):
            wrong = "kv_split (K and V split into TF32 parts) is for the float32 dK/dV kernel on NVIDIA's mma.sync " \
                    "(3xTF32, 32-lane warps)"
        elif self.tile.dq_single and not mma_dkdv:
            wrong = "dq_single (dQ's units one at a time) is for the dK/dV kernel on mma.sync or MFMA"
        else:
            return
        raise ValueError(f"{wrong}, not {self.kernel} {self.stage} {self.dtype} on {self.lanes} lanes"
                         + (" (warpgroup MMA)" if self.tile.warpgroup_mma else ""))

    FILES = {
        ("mma", "prep"): ("flash_bwd_prep.cu", "pa_flash_bwd_prep"),
        ("mma", "dkdv"): ("flash_bwd_dkdv_mma.cu", "pa_flash_bwd_dkdv_mma"),
        ("mma", "dq"): ("flash_bwd_dq_mma.cu", "pa_flash_bwd_dq_mma"),
        ("simt", "dkdv"): ("flash_bwd_dkdv_simt.cu", "pa_flash_bwd_dkdv_simt"),
        ("simt", "dq"): ("flash_bwd_dq_simt.cu", "pa_flash_bwd_dq_simt"),
    }
    KERNELS = {"mma": FILES[("mma", "dkdv")], "simt": FILES[("simt", "dkdv")]}

    @property
    def filename(self) -> str:
        return self.FILES[(self.kernel, self.stage)][0]

    @property
    def function(self) -> str:
        return self.FILES[(self.kernel, self.stage)][1]

    def family_defines(self) -> dict[str, int]:
        t = self.tile
        if self.stage == "prep":
            return {"PA_ROW_LANES": t.row_lanes}
        if self.kernel == "simt":
            return {}
        stages = {"PA_STAGES": t.stages, "PA_BLOCK_THREADS": self.block_threads} if self.stage == "dkdv" else {}
        wgmma = {"PA_MMA_WGMMA": 1} if t.warpgroup_mma else {}
        kv_split = {"PA_KV_SPLIT": 1} if t.kv_split else {}
        dq_single = {"PA_DQ_SINGLE": 1} if t.dq_single else {}
        return {"PA_SPLIT": t.split, "PA_MIN_BLOCKS": t.min_blocks} | stages | wgmma | kv_split | dq_single

    @property
    def block_threads(self) -> int:
        """The warpgroup-MMA dK/dV kernel adds a warpgroup that writes dQ (``WRITERS`` in the kernel, which checks
        this count: ``PA_BLOCK_THREADS``)."""
        return self.tile.threads + (128 if self.tile.warpgroup_mma and self.stage == "dkdv" else 0)

    @property
    def smem_bytes(self) -> int:
        """mma dkdv: K and V tiles (with ``kv_split`` their rests too), ``stages`` buffers of Q and dO tiles (rows
        padded by 16 bytes), the dS tile [block_m][block_n + 16 bytes] and ``stages`` buffers of the LSE and delta rows
        (warpgroup MMA: unpadded swizzled rows, a float32 dQ tile [block_m][head_dim + 8] with its two transaction
        barriers, two per buffer of the query tiles and one for a packed sequence's last one, and slack to align the
        tiles to 1024 bytes); mma dq: Q, dO, K and V tiles and the rows; simt: the four float32 tiles (rows padded by 4
        floats), the P and dS tiles (rows padded by one float) and the rows. prep: none."""
        t = self.tile
        if self.stage == "prep":
            return 0
        if self.kernel == "simt":
            row = self.head_dim + 4
            tile = t.block_n * (t.block_m + 1) if self.stage == "dkdv" else t.block_m * (t.block_n + 1)
            return 4 * (2 * (t.block_m + t.block_n) * row + 2 * tile + 2 * t.block_m)
        size = 4 if self.dtype == "float32" else 2
        if t.warpgroup_mma:  # rows of whole 64-column blocks
            tiles = (2 * t.block_n + 2 * t.stages * t.block_m) * -(-self.head_dim // 64) * 64 + t.block_m * t.block_n
            dq_tile = 4 * t.block_m * (self.head_dim // t.split + 8) + 16 + 16 * t.stages + 8
            return size * tiles + 8 * t.stages * t.block_m + dq_tile + 1024 - 16
        row = self.head_dim + 16 // size
        if self.stage == "dkdv":
            kv_tiles = 4 if t.kv_split else 2  # K and V (and their rests)
            tiles = kv_tiles * t.block_n * row + 2 * t.stages * t.block_m * row + t.block_m * (t.block_n + 16 // size)
            return size * tiles + 8 * t.stages * t.block_m
        return size * (2 * t.block_m * row + 2 * t.block_n * row) + 8 * t.block_m


@dataclass(frozen=True)
class BwdPlan:
    """The kernels of one backward: delta and zeroed dQ sums, dK/dV (with atomic dQ), and the deterministic dQ."""

    prep: BwdSpec
    dkdv: BwdSpec
    dq: BwdSpec

    @property
    def specs(self) -> tuple[BwdSpec, BwdSpec, BwdSpec]:
        return (self.prep, self.dkdv, self.dq)


TABLES: dict[str, tuple[dict[str, Rows], dict[str, Rows]]] = {
    "mma": (DKDV_TILES, DQ_TILES),
    "simt": (SIMT_DKDV_TILES, SIMT_DQ_TILES),
}


def select(target: Target, dtype: str, head_dim: int, kernel: str | None = None,
           mask_ext: bool = False, score_mods: bool = True) -> BwdPlan:
    """The backward kernels for ``dtype`` and ``head_dim`` on ``target``; ``kernel`` ("mma" or "simt") asks for one
    implementation, ``mask_ext`` the extended-mask builds of the dK/dV and dQ kernels (the first kernel is the
    same): for a call without score modifiers (``score_mods`` False) the warpgroup MMA rows' builds without them,
    else the rows of DKDV_TILES_EXT where there are some."""
    fam = target.family
    if dtype not in DTYPES:
        raise NotImplementedError(f"dtype {dtype} is not supported yet; supported: {', '.join(DTYPES)}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported; supported: {', '.join(map(str, HEAD_DIMS))}")
    if kernel is not None and kernel not in ("mma", "simt"):
        raise ValueError(f"kernel must be one of mma, simt or None, got {kernel!r}")
    key = (dtype, head_dim)
    chosen = kernel or next((k for k in TABLES if key in TABLES[k][0].get(fam, {})), None)
    if chosen is None or chosen not in TABLES or key not in TABLES[chosen][0].get(fam, {}):
        which = f"{kernel} backward kernel" if kernel else "backward kernel"
        raise NotImplementedError(f"{dtype} attention has no {which} for {target.tuning_arch} at head dim "
                                  f"{head_dim} yet")
    dkdv_rows, dq_rows = TABLES[chosen]
    prep_tile = T(block_m=PREP_THREADS // PREP_ROW_LANES, block_n=0, threads=PREP_THREADS, row_lanes=PREP_ROW_LANES)
    dkdv_tile = dkdv_rows[fam][key]
    lengths_only = mask_ext and not score_mods and dkdv_tile.warpgroup_mma
    if chosen == "mma" and mask_ext and not lengths_only:
        dkdv_tile = DKDV_TILES_EXT.get(fam, {}).get(key, dkdv_tile)
    base = BwdSpec(chosen, dtype, head_dim, dkdv_tile, target.lanes, target.emulated, mask_ext,
                   score_mods=not lengths_only)
    # The first kernel is the same for both implementations (it reads the input type, so it is built as "mma").
    plan = BwdPlan(replace(base, kernel="mma", tile=prep_tile, stage="prep", mask_ext=False, score_mods=True), base,
                   replace(base, tile=dq_rows[fam][key], stage="dq"))
    for spec in plan.specs:
        spec.check_fits(target)
    return plan


def has_kernel(target: Target, dtype: object, head_dim: int = 64) -> bool:
    """Whether the tables give ``target`` a backward for ``dtype`` (a torch dtype or its name) and ``head_dim``."""
    return selects(select, target, dtype, head_dim)


def shipped_variants(target: Target) -> list[BwdSpec]:
    """Every backward kernel portattn can use on ``target``: plain, with the extended masks, and with those but no
    score modifiers."""
    fam = target.family
    specs: list[BwdSpec] = []
    for mask_ext, score_mods in ((False, True), (True, True), (True, False)):
        for kernel, (dkdv_rows, _) in TABLES.items():
            for dt in DTYPES:
                for d in HEAD_DIMS:
                    if (dt, d) in dkdv_rows.get(fam, {}):
                        plan = select(target, dt, d, kernel, mask_ext, score_mods)
                        specs += [s for s in plan.specs if s not in specs]
    return specs


@dataclass(frozen=True)
class BwdLaunches:
    """The launches of one backward signature: the first kernel, dK/dV, and (deterministic) the dQ kernel; and the
    float32 workspaces they take (``variant.allocation``): the row arrays delta and LSE in log2 units, and (atomic
    backward) the sums of dQ, [batch, heads_q, seq_q, d] like the kernels' q."""

    prep: loader.Launch
    dkdv: loader.Launch
    dq: loader.Launch | None
    row_arrays: torch.Tensor
    dq_sums: torch.Tensor | None


_launches: dict[tuple, BwdLaunches] = {}


def run(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
        grad_lse: torch.Tensor | None, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, scale: float,
        deterministic: bool, masking: Masking) -> BwdLaunches:
    """Launch the backward on ``q``'s device and torch's current stream: dq, dk, dv receive the gradients. Inputs are
    validated, non-empty, in a layout the kernels read in place, and ``scale >= 0``; lse is the forward's (contiguous,
    [batch, heads_q, seq_q], or [heads_q, total_q] for packed sequences, whose tensors are [1, heads, total, d]
    views as in ``forward.run``), and grad_lse (float32, contiguous like lse, or None) the gradient that reaches it.
    The launches of a call signature are made once; they are returned, so that a caller can ``start`` them again on
    tensors of the same signature."""
    target = launch_target(q.device)
    key = (target, q.device.index, q.dtype, q.shape, k.shape, q.stride(), k.stride(), v.stride(), out.stride(),
           dout.stride(), dq.stride(), dk.stride(), dv.stride(), deterministic, masking.key, OVERRIDES.get(),
           forced_kernel())
    launches = _launches.get(key)
    if launches is None:
        launches = loader.remember(_launches, key, _plan(dout, q, k, v, out, dq, dk, dv, deterministic, masking,
                                                         target))
    start(launches, dout, q, k, v, out, lse, grad_lse, dq, dk, dv, scale, masking)
    return launches


def start(launches: BwdLaunches, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          out: torch.Tensor, lse: torch.Tensor, grad_lse: torch.Tensor | None, dq: torch.Tensor, dk: torch.Tensor,
          dv: torch.Tensor, scale: float, masking: Masking) -> None:
    """Launch ``launches`` (from ``run``) on tensors of its signature (only their addresses are read)."""
    work = new_from(launches.row_arrays)  # delta, then the LSE in log2 units
    sums = None if launches.dq_sums is None else new_from(launches.dq_sums)
    delta = work.data_ptr()
    fields = {} if masking is PLAIN or masking is CAUSAL else call_fields(masking)
    fields.update(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=out.data_ptr(), dout=dout.data_ptr(),
                  lse=lse.data_ptr(), lse_log2=delta + 2 * work.numel(), delta=delta,
                  dq_accum=None if sums is None else sums.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(),
                  dv=dv.data_ptr(), scale=scale, scale_log2=exp2_scale(scale))
    params = launches.dkdv.fill(fields)  # the kernels share the template (_plan) and take the same fields
    stream = current_stream(q.device)
    launches.prep.send(params, stream)
    if grad_lse is not None:  # the LSE's own gradient: dS = P (dP - delta + grad_lse)
        work[:work.numel() // 2].sub_(grad_lse.reshape(-1))
    launches.dkdv.send(params, stream)
    if sums is None:
        launches.dq.send(params, stream)
    else:
        dq.copy_(sums)


def _plan(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dq: torch.Tensor,
          dk: torch.Tensor, dv: torch.Tensor, deterministic: bool, masking: Masking, target: Target) -> BwdLaunches:
    plan = select(target, dtype_name(q.dtype), q.shape[-1], forced_kernel(), masking.extended, masking.modified)
    tweak = OVERRIDES.get().tweak
    if tweak is not None:
        plan = BwdPlan(*(tweak(spec) for spec in plan.specs))
    heads_q, heads_kv = q.shape[1], k.shape[1]
    rows_shape = q.shape[:3]  # the row arrays: per packed row for variable lengths
    batch, seqlen_q, seqlen_k = masking.lengths(q, k)
    num_m_blocks = -(-seqlen_q // plan.dq.tile.block_m)
    num_n_blocks = -(-seqlen_k // plan.dkdv.tile.block_n)
    p = BwdParams(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                  total_q=rows_shape[2], total_k=k.shape[2], num_m_blocks=num_m_blocks, num_n_blocks=num_n_blocks,
                  dq_atomic=int(not deterministic))
    set_mask_fields(p, masking)
    maps: tuple[tuple[str, str], ...] = ()
    if plan.dkdv.tile.warpgroup_mma:  # its copying thread reads the query tiles of Q and dO through bulk-copy maps
        set_tensor_maps(p, target, plan.dkdv.dtype, {"map_q": (q, plan.dkdv.tile.block_m),
                                                     "map_do": (dout, plan.dkdv.tile.block_m)})
        maps = (("map_q", "q"), ("map_do", "dout"))
    set_strides(p, {"q": q, "k": k, "v": v, "o": out, "do": dout, "dq": dq, "dk": dk, "dv": dv})
    grids = {
        "prep": -(-rows_shape[0] * heads_q * rows_shape[2] // plan.prep.tile.block_m),
        "dkdv": num_n_blocks * plan.dkdv.tile.split * batch * heads_kv,
        "dq": num_m_blocks * plan.dq.tile.split * batch * heads_q,
    }
    launches = []
    for spec in plan.specs if deterministic else plan.specs[:2]:
        if grids[spec.stage] >= 2**31:
            raise ValueError(f"problem too large: {grids[spec.stage]} blocks for {spec.function} (must be < 2**31)")
        fn = loader.kernel_function(spec, target, q.device.index)
        launches.append(loader.Launch(target, fn, grids[spec.stage], spec.block_threads, spec.smem_bytes, p,
                                      tensor_maps=maps if spec.stage == "dkdv" else ()))
    row_arrays = allocation((2 * rows_shape[0] * heads_q * rows_shape[2],), torch.float32, q.device)
    dq_sums = None if deterministic else allocation(q.shape, torch.float32, q.device)
    return BwdLaunches(launches[0], launches[1], launches[2] if deterministic else None, row_arrays, dq_sums)
