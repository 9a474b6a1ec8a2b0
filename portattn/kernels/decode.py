"""The decode kernel family: attention of a few query positions per sequence over a KV cache (contiguous or paged),
with split-KV and grouped-query packing.

Kernels, one parameter struct (``PaDecodeParams``, ``pa_decode_params.cuh``):
- ``flash_decode_append.cu``: new keys and values written into the cache in place (when the call brings some);
- ``flash_decode_mma.cu``: per block, the packed query rows of one (sequence, key/value head) against one split of
  its keys, on the matrix units;
- ``flash_decode_combine.cu``: the splits' rows merged by their LSE (when there is more than one split).

Where the target has overlapping launches (``Target.overlapping_launches``), each kernel is launched to start
while the previous kernel on the stream ends, and waits for it before touching memory: the combine's blocks are
placed while the attend kernel's last blocks run, instead of after it ends.

Masks are aligned bottom-right (``masking.Masking``: causal, windows); windows with a left bound, softcap and ALiBi
slopes take the attend kernel's extended-mask build (``PA_MASK_EXT``). A sequence may read another cache row
(``cache_batch_idx``) and start past the cache's first rows (``cache_leftpad``), as in flash-attn.

Tuning is data: ``DECODE_TILES[family][(dtype, head dim)]`` lists the tiles by the packed rows they hold
(``block_m``: query heads per key/value head times query positions, 16 or 64), ``block_n`` keys per tile. The
number of splits comes from the shape and the GPU's multiprocessor count (``splits``), or from the caller.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass, replace

import torch

from ..errors import UnsupportedTargetError
from ..runtime import loader
from ..runtime.params import struct_from_header
from ..runtime.target import Target
from .masking import NONE, Masking
from .variant import (
    DTYPES,
    HALF,
    HEAD_DIMS,
    KernelSpec,
    Rows,
    TileConfig,
    capturing,
    current_stream,
    dtype_name,
    exp2_scale,
    launch_target,
    resident_blocks,
    rows,
)

T = TileConfig
F32 = ("float32",)

# One wave per 16 packed rows; the 64-row tiles (4 waves) serve speculative decoding and wide groups. NVIDIA: K and
# V stream through three buffers (cp.async), so that two tiles are in flight while one is computed. At d = 96 and
# 128 two waves share the 16 rows, 16 keys of each tile apiece (key_waves: a few percent on short caches with one
# key/value head, scripts/tune_decode.py); at d = 32 and 64 that would leave each lane so few copies that the loader
# keeps per-copy addresses, a page-table lookup each, and paged caches slow down. swizzled: SWIZZLED_MIN_TILES.
_NV = rows(HALF, {32: T(block_m=16, block_n=32, threads=32, stages=3)}) | rows(
    HALF, {64: T(block_m=16, block_n=32, threads=32, stages=3, swizzled=True)}) | rows(
    HALF, {96: T(block_m=16, block_n=32, threads=64, stages=3, key_waves=2)}) | rows(
    HALF, {128: T(block_m=16, block_n=32, threads=64, stages=3, key_waves=2, swizzled=True)}) | rows(
    HALF, {256: T(block_m=16, block_n=16, threads=32, stages=3)}) | rows(
    F32, {d: T(block_m=16, block_n=16, threads=32, stages=3) for d in (32, 64, 96, 128)}) | rows(
    F32, {256: T(block_m=16, block_n=16, threads=32)})
# float32 d = 256 keeps 16-row tiles (64 rows spill with the extended masks under NVRTC 13.0) and one K/V buffer (two
# spill 12 bytes since the TF32 split is made with integer instructions).
_NV_WIDE = {key: replace(tile, block_m=64, threads=128, key_waves=1) for key, tile in _NV.items()
            if key != ("float32", 256)}
# 64 KiB of LDS per CU, synchronous copies on HIP (one buffer): 4-wave workgroups of 64 packed rows with 16-key
# tiles keep two workgroups (two waves per SIMD) on a CU where their tiles fit twice (16-bit d <= 128, float32
# d <= 64), and there the registers are held to that too (min_blocks, which also keeps CDNA1's 256 VGPRs within
# two waves); float32 d = 256 takes one wave of 16 rows.
_AMD = rows(HALF, {d: T(block_m=64, block_n=16, threads=256, min_blocks=2) for d in (32, 64, 96, 128)}) | rows(
    F32, {d: T(block_m=64, block_n=16, threads=256, min_blocks=2) for d in (32, 64)}) | rows(
    HALF, {256: T(block_m=64, block_n=16, threads=256)}) | rows(
    F32, {d: T(block_m=64, block_n=16, threads=256) for d in (96, 128)}) | rows(
    F32, {256: T(block_m=16, block_n=16, threads=64)})
_AMD_NO_BF16 = {key: tile for key, tile in _AMD.items() if key[0] != "bfloat16"}

DECODE_TILES: dict[str, tuple[Rows, ...]] = {
    "sm80": (_NV, _NV_WIDE), "sm86": (_NV, _NV_WIDE), "sm90": (_NV, _NV_WIDE),
    "cdna1": (_AMD_NO_BF16,), "cdna2": (_AMD,), "cdna3": (_AMD,), "cdna4": (_AMD,),
}
HELPER_THREADS = 256  # append kernel
# The combine: blocks of threads in slots of COMBINE_ROW_LANES lanes; a row's splits are spread over enough slots (a
# power of two, at most a block's) for about a layout's splits per slot each. COMBINE_LAYOUTS[i] = (most splits,
# threads per block, splits per slot): a call takes the first layout whose most splits its count does not exceed.
# Up to 64 splits, 256-thread blocks of two splits per slot ran 0.93-1.15x blocks of 512 threads with four splits
# per slot (geometric mean 1.035x and 1.049x in two runs) over twelve calls (H200, bf16, d = 64 and 128;
# scripts/tune_decode_combine.py): many small blocks beat a few large ones; 64- and 128-thread blocks and 8- or
# 32-lane slots were slower. With more splits (calls of one sequence), a row needs more than a 256-thread block's 16
# slots: there 512-thread blocks of four splits per slot ran 4-8 % faster (d = 64, 8:1 heads, 4096 keys in 128
# splits: 6.72 against 7.20 us), and switching at 32 or 128 splits instead of 64 was no better (docs/benchmarks.md).
COMBINE_ROW_LANES = 16
COMBINE_LAYOUTS: tuple[tuple[int, int, int], ...] = ((64, 256, 2), (256, 512, 4))
MAX_SPLITS = 256
MAX_QUERIES = 16  # attention calls with at most this many query rows (not causal) run as decoding
# Automatic splits: a call takes only the blocks that keep about BYTES_IN_FLIGHT of key/value tiles streaming; beyond
# that, each split's partial rows, its pipeline's start and the combine's work cost more than the extra blocks'
# reading saves (scripts/tune_decode.py); a call whose blocks keep BYTES_IN_FLIGHT streaming without splits takes
# none (no partial results, no combine). Never more than SPLIT_ROUNDS rounds of the attend blocks that the GPU holds
# at once. Calls of more than 512 MiB of K and V used to aim at 8 MiB: on an H100 one of three such cells ran 2 %
# faster with it and two 1-2 % slower, on an H200 all four with splits ran 1.5-2.3 % slower (docs/benchmarks.md).
SPLIT_ROUNDS = 2
BYTES_IN_FLIGHT = 4 << 20
# A split takes at least this many key tiles: shorter ones cost more in partial writes and the combine launch than
# their parallel reading saves (scripts/tune_decode.py), and a short cache then needs no combine.
MIN_SPLIT_TILES = 2
# A small call spreading its keys over the multiprocessors (splits) takes splits of SPREAD_TILES[family][(dtype, head
# dim, tile rows)] key tiles where those still make at least SPREAD_MIN_BLOCKS blocks, else of one tile. Two tiles per
# split pay on the 16-row tiles at 16-bit d = 96 and 128 on sm_90 (H100, graph timing, one sequence with one key/value
# head and 4096 keys: d = 128 128 one-tile splits 8.33-8.41 us, 64 two-tile splits 8.15-8.19 us; d = 96 7.75-7.78 ->
# 7.49 us; four sequences of 1024 keys 1.01-1.02x, other small calls 0.99-1.02x); at d = 64 they ran 0.98-1.00x one
# tile, and on the 64-row tiles (several query rows per sequence) 0.87-1.03x, mostly below (bf16, d = 96 and 128;
# scripts/ab_decode_spread.py).
SPREAD_TILES: dict[str, dict[tuple[str, int, int], int]] = {
    "sm90": {(dt, d, 16): 2 for dt in HALF for d in (96, 128)}}
SPREAD_MIN_BLOCKS = 64
# Tiles marked swizzled (NVIDIA, 16-bit, d = 64 and 128) take the 128-byte swizzled shared layout: a warp's copies of
# cache rows then go out as whole 128-byte L2 requests, 3-8 % faster on calls that stream the cache. Splits of fewer
# than this many key tiles ran 2-9 % slower with them and keep padded rows (DecodePlan.short_attend).
SWIZZLED_MIN_TILES = 4

DecodeParams = struct_from_header("pa_decode_params.cuh", "PaDecodeParams")


@dataclass(frozen=True)
class DecodeSpec(KernelSpec):
    """One decode kernel: ``stage`` is "append", "attend" or "combine"."""

    stage: str = "attend"

    FILES = {
        "append": ("flash_decode_append.cu", "pa_flash_decode_append"),
        "attend": ("flash_decode_mma.cu", "pa_flash_decode_mma"),
        "combine": ("flash_decode_combine.cu", "pa_flash_decode_combine"),
    }
    KERNELS = {"mma": FILES["attend"]}

    @property
    def filename(self) -> str:
        return self.FILES[self.stage][0]

    @property
    def function(self) -> str:
        return self.FILES[self.stage][1]

    @property
    def swizzled(self) -> bool:
        """Whether the attend kernel's shared tiles take the 128-byte swizzled layout: its tile asks for it (only
        NVIDIA's 16-bit rows at d = 64 and 128 do; the kernel refuses to build it for anything mma.sync cannot read
        that way)."""
        return self.stage == "attend" and self.tile.swizzled

    @property
    def options(self) -> list[str]:
        return [*super().options, *["swizzled"] * self.swizzled]

    def family_defines(self) -> dict[str, int]:
        if self.stage == "attend":
            return {"PA_STAGES": self.tile.stages, "PA_MIN_BLOCKS": self.tile.min_blocks,
                    "PA_KEY_WAVES": self.tile.key_waves} | ({"PA_TILE_SWIZZLED": 1} if self.swizzled else {})
        return {"PA_ROW_LANES": self.tile.row_lanes} if self.stage == "combine" else {}

    @property
    def smem_bytes(self) -> int:
        """attend: the packed Q tile and ``stages`` K and V tiles, rows padded by 16 bytes (swizzled: unpadded);
        append, combine: none."""
        if self.stage != "attend":
            return 0
        size = 4 if self.dtype == "float32" else 2
        t = self.tile
        return size * (t.block_m + 2 * t.stages * t.block_n) * (self.head_dim + (0 if self.swizzled else 16 // size))


@dataclass(frozen=True)
class DecodePlan:
    append: DecodeSpec
    attend: DecodeSpec
    combines: tuple[DecodeSpec, ...]  # one per COMBINE_LAYOUTS entry
    short_attend: DecodeSpec  # for splits of fewer than SWIZZLED_MIN_TILES key tiles: attend with padded rows


def attend_kernel(plan: DecodePlan, keys_per_split: int) -> DecodeSpec:
    """The attend kernel of a call whose splits take ``keys_per_split`` keys: swizzled shared tiles (where the
    tile has them) pay off on splits of at least SWIZZLED_MIN_TILES key tiles."""
    return plan.attend if keys_per_split >= SWIZZLED_MIN_TILES * plan.attend.tile.block_n else plan.short_attend


# select's answers: a call whose key length is new plans its launches (once per generated token). Whoever changes
# DECODE_TILES or the split rules at run time (scripts/tune_decode.py) calls forget_plans.
_selected: dict[tuple, DecodePlan] = {}


def forget_plans() -> None:
    """Drop every kept kernel choice and launch state: later calls plan afresh."""
    _selected.clear()
    _calls.clear()
    _shapes.clear()


def select(target: Target, dtype: str, head_dim: int, packed_rows: int = 1, mask_ext: bool = False) -> DecodePlan:
    """The decode kernels for ``dtype`` and ``head_dim`` on ``target``, for ``packed_rows`` query rows per
    key/value head (query heads per key/value head times query positions); ``mask_ext``: the attend kernel's
    extended-mask build."""
    key = (target, dtype, head_dim, packed_rows, mask_ext)
    plan = _selected.get(key)
    if plan is None:
        plan = loader.remember(_selected, key, _select(target, dtype, head_dim, packed_rows, mask_ext))
    return plan


def _select(target: Target, dtype: str, head_dim: int, packed_rows: int, mask_ext: bool) -> DecodePlan:
    fam = target.family
    if dtype not in DTYPES:
        raise NotImplementedError(f"dtype {dtype} is not supported yet; supported: {', '.join(DTYPES)}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported; supported: {', '.join(map(str, HEAD_DIMS))}")
    tables = DECODE_TILES.get(fam, ())
    candidates = [DecodeSpec("mma", dtype, head_dim, t[(dtype, head_dim)], target.lanes, target.emulated, mask_ext)
                  for t in tables if (dtype, head_dim) in t]
    if not candidates:
        raise NotImplementedError(f"{dtype} decoding has no kernel for {target.tuning_arch} at head dim {head_dim} yet")
    fitting = [c for c in candidates if _fits(c, target)]
    if not fitting:
        candidates[0].check_fits(target)  # raises, naming the shared memory it needs
    attend = next((c for c in fitting if c.tile.block_m >= packed_rows), fitting[-1])
    helper = T(block_m=HELPER_THREADS // COMBINE_ROW_LANES, block_n=0, threads=HELPER_THREADS)
    combines = tuple(replace(attend, tile=T(block_m=threads // COMBINE_ROW_LANES, block_n=0, threads=threads,
                                            row_lanes=COMBINE_ROW_LANES), stage="combine", mask_ext=False)
                     for _, threads, _ in COMBINE_LAYOUTS)
    return DecodePlan(replace(attend, tile=helper, stage="append", mask_ext=False), attend, combines,
                      replace(attend, tile=replace(attend.tile, swizzled=False)) if attend.swizzled else attend)


def _fits(spec: DecodeSpec, target: Target) -> bool:
    try:
        spec.check_fits(target)
    except UnsupportedTargetError:
        return False
    return True


def takes(masking: Masking) -> bool:
    """Whether the decode kernels can take a call of ``masking``: no mask tensor or variable lengths, and the
    diagonal bottom-right where it matters (causal, windows, ALiBi)."""
    if masking.mask is not None or masking.varlen:
        return False
    return masking.bottom_right or (masking.left == NONE and masking.right == NONE and masking.alibi is None)


def serves(target: Target, dtype: object, head_dim: int) -> bool:
    """Whether the decode tables have a tile for ``dtype`` and ``head_dim`` on ``target`` (no variant is built)."""
    return any((dtype_name(dtype), head_dim) in t for t in DECODE_TILES.get(target.family, ()))


def shipped_variants(target: Target) -> list[DecodeSpec]:
    """Every decode kernel portattn can use on ``target``, then the attend kernels' extended-mask builds."""
    specs: list[DecodeSpec] = []
    for mask_ext in (False, True):
        for table in DECODE_TILES.get(target.family, ()):
            for dt, d in table:
                plan = select(target, dt, d, table[(dt, d)].block_m, mask_ext)
                for spec in (plan.append, plan.attend, plan.short_attend, *plan.combines):
                    if spec not in specs:
                        specs.append(spec)
    return specs  # a tile that does not fit the target gives way to one that does (select)


def splits(resident: int, multiprocessors: int, base_blocks: int, keys: int, block_n: int, tile_bytes: int,
           spread_tiles: int = 1) -> int:
    """Key splits per (sequence, head, row block), for ``base_blocks`` of those, ``resident`` attend blocks held by
    the GPU's ``multiprocessors`` at once and key tiles of ``block_n`` keys and ``tile_bytes`` bytes of K and V: at
    least MIN_SPLIT_TILES key tiles per split, at most MAX_SPLITS, up to SPLIT_ROUNDS rounds of blocks, and only the
    blocks that keep BYTES_IN_FLIGHT streaming; of those counts the one that fills its last round best (ties: the
    most splits). A call of
    more than MIN_SPLIT_TILES key tiles that would still leave multiprocessors without a block spreads its keys
    further, up to a block per multiprocessor: so few blocks take longer to read their keys than the combine costs.
    Its splits then take ``spread_tiles`` key tiles where that still makes SPREAD_MIN_BLOCKS blocks, else one."""
    base = max(base_blocks, 1)
    most = max(1, min(-(-SPLIT_ROUNDS * resident // base), keys // (MIN_SPLIT_TILES * block_n), MAX_SPLITS))
    most = min(most, -(-BYTES_IN_FLIGHT // (tile_bytes * base)))
    n = _best_filling(resident, base, most)
    tiles = -(-keys // block_n)
    if base * n < multiprocessors and tiles > MIN_SPLIT_TILES:
        per_split = spread_tiles if base * (tiles // spread_tiles) >= SPREAD_MIN_BLOCKS else 1
        n = max(n, min(tiles // per_split, multiprocessors // base, MAX_SPLITS))
    return n


@functools.lru_cache(maxsize=1024)
def _best_filling(resident: int, base: int, most: int) -> int:
    """Of 1..most splits of ``base`` blocks, the count whose last round of ``resident`` blocks is fullest (to two
    decimals; ties: the most splits). Kept: calls of a cache that grows one key per token mostly ask the same."""
    fill = lambda n: round(base * n / (-(-base * n // resident) * resident), 2)  # noqa: E731
    return max(range(1, most + 1), key=lambda n: (fill(n), n))


def combine_layout(n_splits: int) -> int:
    """The index in COMBINE_LAYOUTS of the combine layout for ``n_splits`` splits (at most MAX_SPLITS)."""
    return next(i for i, (most, _, _) in enumerate(COMBINE_LAYOUTS) if n_splits <= most)


def combine_groups(n_splits: int) -> int:
    """Slots of the combine kernel that share one row: a power of two, at most a block's slots."""
    _, threads, per_slot = COMBINE_LAYOUTS[combine_layout(n_splits)]
    wanted = -(-n_splits // per_slot)
    return min(threads // COMBINE_ROW_LANES, 1 << max(0, wanted - 1).bit_length())


def _strides_bnh(t: torch.Tensor) -> tuple[int, int, int]:
    """Element strides of a [B, N, H, D] tensor's dims 0..2 (a size-1 dim gets stride 0)."""
    return tuple(0 if t.shape[i] == 1 else t.stride(i) for i in range(3))  # type: ignore[return-value]


@dataclass(frozen=True)
class DecodeCall:
    """The launches of one call signature and their parameter struct's template: the launches' own (shared by the
    calls whose caches differ only in length, as a cache that grows by one key per generated token makes them) with
    what depends on the cache (its strides and capacity, the keys per split) set, at ``template_address``; ``sizes``:
    the float32 elements of the splits' partial outputs and of their LSE (None with one split)."""

    launches: tuple[loader.Launch, ...]
    sizes: tuple[int, int] | None
    template: ctypes.Structure
    template_address: int


@dataclass
class _Shape:
    """What the calls of one signature but for the cache's length share: the kernels, the parameter template (without
    the fields that depend on the length) and, per split count and attend kernel, their launches."""

    plan: DecodePlan
    params: ctypes.Structure
    base_blocks: int  # attend blocks per split: sequences x key/value heads x row blocks
    resident: int
    spread_tiles: int
    launches: dict[tuple[int, DecodeSpec], tuple[tuple[loader.Launch, ...], tuple[int, int] | None]]


_calls: dict[tuple, DecodeCall] = {}
_shapes: dict[tuple, _Shape] = {}


def run(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None,
        cache_seqlens: torch.Tensor, k_new: torch.Tensor | None, v_new: torch.Tensor | None,
        block_table: torch.Tensor | None, masking: Masking, scale: float, num_splits: int, max_keys: int | None,
        cache_batch_idx: torch.Tensor | None = None, cache_leftpad: torch.Tensor | None = None) -> DecodeCall:
    """Append (when k_new is given), attend and combine on ``q``'s device and torch's current stream. Inputs are
    validated, in kernel layouts (unit stride along the head dim, 16-byte aligned rows), ``scale >= 0``;
    ``cache_seqlens`` (and ``cache_batch_idx``, ``cache_leftpad``) are int32 on the device; ``masking`` is aligned
    bottom-right and has no mask tensor or variable lengths; ``max_keys`` bounds the keys of any sequence when the
    caller knows it. The launch state of a call signature is made once (``prepare``); it is returned, so that a caller
    can ``start`` it again on tensors of the same signature."""
    call = prepare(q, k_cache, v_cache, out, lse, k_new, v_new, block_table, masking, num_splits, max_keys)
    start(call, q, k_cache, v_cache, out, lse, cache_seqlens, k_new, v_new, block_table, masking, scale,
          cache_batch_idx, cache_leftpad)
    return call


def prepare(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
            lse: torch.Tensor | None, k_new: torch.Tensor | None, v_new: torch.Tensor | None,
            block_table: torch.Tensor | None, masking: Masking, num_splits: int, max_keys: int | None) -> DecodeCall:
    """The launch state of ``run``'s call signature, made on its first call."""
    target = launch_target(q.device)
    key = (target, q.device.index, q.dtype, q.shape, q.stride(), k_cache.shape, k_cache.stride(), v_cache.stride(),
           out.stride(), lse is None, None if k_new is None else (k_new.shape, k_new.stride(), v_new.stride()),
           None if block_table is None else block_table.shape, masking.key, num_splits, max_keys)
    call = _calls.get(key)
    if call is None:
        paged = block_table is not None
        shape_key = (target, q.device.index, q.dtype, q.shape, q.stride(), k_cache.shape[0],
                     k_cache.shape[1] if paged else None, k_cache.shape[2:], out.stride(), *key[9:13])
        shape = _shapes.get(shape_key)
        if shape is None:
            shape = loader.remember(_shapes, shape_key,
                                    _shape(q, k_cache, out, k_new, v_new, block_table, masking, target))
        call = loader.remember(_calls, key, _call(shape, q, k_cache, v_cache, block_table, masking, num_splits,
                                                  max_keys, target))
    return call


def start(call: DecodeCall, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
          lse: torch.Tensor | None, cache_seqlens: torch.Tensor, k_new: torch.Tensor | None,
          v_new: torch.Tensor | None, block_table: torch.Tensor | None, masking: Masking, scale: float,
          cache_batch_idx: torch.Tensor | None = None, cache_leftpad: torch.Tensor | None = None) -> None:
    """Launch ``call`` (from ``prepare``) on tensors of its signature (only their addresses are read)."""
    launches, sizes = call.launches, call.sizes
    stream = current_stream(q.device)
    params = launches[0].params_from(call.template_address)  # the launches share the template (_launches)
    p = params.struct  # the per-call fields, set one by one (a dictionary of them costs the host more)
    p.q, p.k, p.v, p.o = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr()
    p.cache_seqlens, p.scale, p.scale_log2 = cache_seqlens.data_ptr(), scale, exp2_scale(scale)
    if sizes is not None:  # the partial outputs, then their LSE
        parts = _partials(q.device, stream, sizes[0] + sizes[1])  # held until the launches are queued
        address = parts.data_ptr()
        p.o_part, p.lse_part = address, address + 4 * sizes[0]
    if lse is not None:
        p.lse = lse.data_ptr()
    if k_new is not None:
        p.k_new, p.v_new = k_new.data_ptr(), v_new.data_ptr()  # type: ignore[union-attr]
    for name, t in (("block_table", block_table), ("cache_batch_idx", cache_batch_idx),
                    ("cache_leftpad", cache_leftpad), ("alibi_slopes", masking.alibi)):
        if t is not None:  # else null, as in the template
            setattr(p, name, t.data_ptr())
    if masking.softcap > 0:
        p.softcap = masking.softcap
    for launch in launches:
        launch.send(params, stream)


# float32 room for the splits' partial results of eager calls, per (device index, stream handle, thread).
_workspaces: dict[tuple[int, int, int], torch.Tensor] = {}


def _partials(device: torch.device, stream: int, elements: int) -> torch.Tensor:
    """At least ``elements`` float32 elements for one call's partial results on ``stream``, torch's current stream.
    Eager calls share a buffer kept per stream and thread and grown as calls need: one thread's calls on a stream are
    queued and run in order, so each call's combine has read the buffer before the next call's attend kernel writes
    it (torch's caching allocator hands a stream's freed blocks back to the same stream alike). A call captured into
    a CUDA graph gets its own allocation, which the graph keeps."""
    if capturing():
        return torch.empty(elements, dtype=torch.float32, device=device)
    key = (device.index, stream, threading.get_ident())
    buffer = _workspaces.get(key)
    if buffer is None or buffer.numel() < elements:
        buffer = loader.remember(_workspaces, key, torch.empty(elements, dtype=torch.float32, device=device))
    return buffer


def _log2(n: int) -> int:
    """log2(n) when n is a power of two, else -1."""
    return n.bit_length() - 1 if n & (n - 1) == 0 else -1


def _shape(q: torch.Tensor, k_cache: torch.Tensor, out: torch.Tensor, k_new: torch.Tensor | None,
           v_new: torch.Tensor | None, block_table: torch.Tensor | None, masking: Masking, target: Target) -> _Shape:
    """The kernels and the parameter template (pointers, the fields that depend on the cache's length and the split
    count's unset) of the calls of one signature but for the cache's length."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    packed = heads_q // heads_kv * seqlen_q
    mask_ext = masking.left != NONE or masking.softcap > 0 or masking.alibi is not None
    chosen = select(target, dtype_name(q.dtype), head_dim, packed, mask_ext)
    paged = block_table is not None
    row_blocks = -(-packed // chosen.attend.tile.block_m)
    p = DecodeParams(
        batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q,
        seqlen_new=k_new.shape[1] if k_new is not None else 0,
        page_size=k_cache.shape[1] if paged else 0, page_shift=_log2(k_cache.shape[1]) if paged else -1,
        max_pages=block_table.shape[1] if paged else 0,
        num_pages=k_cache.shape[0] if paged else 0, cache_batch=batch if paged else k_cache.shape[0],
        window_left=masking.left, window_right=masking.right, row_blocks=row_blocks,
    )
    if masking.alibi is not None:
        p.alibi_sb = masking.alibi.stride(0) if masking.alibi.dim() == 2 else 0
    for name, t in (("q", q), ("o", out), ("kn", k_new), ("vn", v_new)):
        if t is not None:
            p_sb, p_sn, p_sh = _strides_bnh(t)
            setattr(p, f"{name}_sb", p_sb)
            setattr(p, f"{name}_sn", p_sn)
            setattr(p, f"{name}_sh", p_sh)
    spread = SPREAD_TILES.get(target.family, {}).get((dtype_name(q.dtype), head_dim, chosen.attend.tile.block_m), 1)
    return _Shape(chosen, p, batch * heads_kv * row_blocks, resident_blocks(chosen.attend, target), spread, {})


def _call(shape: _Shape, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
          block_table: torch.Tensor | None, masking: Masking, num_splits: int, max_keys: int | None,
          target: Target) -> DecodeCall:
    """The launches of one call signature (of ``shape`` with this cache): its split count and keys per split from the
    keys it may see, and the launches of that count and attend kernel, made once per ``shape``."""
    head_dim, seqlen_q = q.shape[3], q.shape[1]
    capacity = block_table.shape[1] * k_cache.shape[1] if block_table is not None else k_cache.shape[1]
    bn = shape.plan.attend.tile.block_n
    keys = max(1, min(capacity, max_keys) if max_keys is not None else capacity)
    if masking.left != NONE and masking.right != NONE:  # the keys some query position sees
        keys = min(keys, masking.left + seqlen_q + masking.right)
    tile_bytes = 2 * bn * head_dim * q.element_size()  # K and V of one key tile
    n_splits = min(num_splits, MAX_SPLITS) or splits(shape.resident, target.multiprocessors, shape.base_blocks,
                                                     keys, bn, tile_bytes, shape.spread_tiles)
    per_split = -(-keys // max(1, min(n_splits, -(-keys // bn))))
    keys_per_split = -(-per_split // bn) * bn  # whole key tiles
    n_splits = -(-keys // keys_per_split)
    attend = attend_kernel(shape.plan, keys_per_split)
    launches = shape.launches.get((n_splits, attend))
    if launches is None:
        launches = shape.launches[n_splits, attend] = _launches(shape, q, n_splits, attend, target)
    template = type(shape.params).from_buffer_copy(launches[0][0].params)  # the first launch's, shared by all
    template.capacity, template.keys_per_split = capacity, keys_per_split
    template.k_sb, template.k_sn, template.k_sh = k_cache.stride()[:3]
    template.v_sb, template.v_sn, template.v_sh = v_cache.stride()[:3]
    return DecodeCall(*launches, template, ctypes.addressof(template))


def _launches(shape: _Shape, q: torch.Tensor, n_splits: int, attend: DecodeSpec,
              target: Target) -> tuple[tuple[loader.Launch, ...], tuple[int, int] | None]:
    """The launches of ``shape`` with ``n_splits`` splits and the ``attend`` kernel (sharing one parameter template),
    and the shape of the splits' float32 partial outputs (None with one split)."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    p = type(shape.params).from_buffer_copy(shape.params)
    p.num_splits, p.combine_groups = n_splits, combine_groups(n_splits)
    grids = []
    if p.seqlen_new > 0:
        per_block = HELPER_THREADS // (head_dim * q.element_size() // 16)
        grids.append((shape.plan.append, -(-batch * p.seqlen_new * p.heads_kv // per_block)))
    grids.append((attend, n_splits * shape.base_blocks))
    if n_splits > 1:
        combine = shape.plan.combines[combine_layout(n_splits)]
        rows_per_block = combine.tile.block_m // p.combine_groups
        grids.append((combine, -(-batch * heads_q * seqlen_q // rows_per_block)))
    launches = []
    for spec, grid in grids:
        if grid >= 2**31:
            raise ValueError(f"problem too large: {grid} blocks for {spec.function} (must be < 2**31)")
        fn = loader.kernel_function(spec, target, q.device.index)
        launches.append(loader.Launch(target, fn, grid, spec.tile.threads, spec.smem_bytes, p,
                                      target.overlapping_launches))
    rows = n_splits * batch * heads_q * seqlen_q
    return tuple(launches), (rows * head_dim, rows) if n_splits > 1 else None
