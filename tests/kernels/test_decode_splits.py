"""The decode kernels' automatic split count and the resident-block count it starts from, without a GPU."""
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from portattn.kernels import decode, variant
from portattn.kernels.masking import PLAIN
from portattn.runtime.resources import Resources, blocks_per_multiprocessor
from portattn.runtime.target import Target

BN = 32
TILE = 2 * BN * 128 * 2  # K and V bytes of a 32-key tile, d = 128, 16-bit
SMS = 132


@pytest.mark.parametrize("base", [1, 2, 7, 8, 64, 256, 1000])
@pytest.mark.parametrize("keys", [1, 63, 64, 4096, 65536, 1 << 20])
def test_splits_stay_within_their_bounds(base, keys):
    resident = 528
    n = decode.splits(resident, SMS, base, keys, BN, TILE)
    assert 1 <= n <= decode.MAX_SPLITS
    spread = base * n <= SMS  # a small call may spread its keys further, up to a block per multiprocessor
    if n > 1:  # every split holds at least MIN_SPLIT_TILES key tiles (spread: one)
        assert keys // n >= (BN if spread else decode.MIN_SPLIT_TILES * BN)
    assert base * n <= max(base, decode.SPLIT_ROUNDS * resident + base)  # no more than the rounds asked for
    if not spread:  # the blocks that keep BYTES_IN_FLIGHT streaming
        assert n == 1 or (n - 1) * base * TILE < decode.BYTES_IN_FLIGHT


def test_short_caches_take_one_split():
    assert decode.splits(528, SMS, 1, decode.MIN_SPLIT_TILES * BN - 1, BN, TILE) == 1
    assert decode.splits(528, SMS, 1, 64, BN, TILE) == 1  # two 32-key tiles: one split, no combine launch


@pytest.mark.parametrize("base,keys,expected", [(1, 96, 3), (1, 256, 8), (1, 4096, 128), (1, 8192, 132),
                                                (4, 1024, 32), (8, 1024, 16), (2, 65536, 128)])
def test_small_calls_spread_over_the_multiprocessors(base, keys, expected):
    """A call of more than two key tiles whose splits of two tiles would leave some of the 132 multiprocessors
    without a block takes splits down to one tile, up to a block per multiprocessor (8 bases of 1024 keys already
    hold 128 blocks of two tiles, and 132 // 8 is 16 splits)."""
    assert decode.splits(528, SMS, base, keys, BN, TILE) == expected


@pytest.mark.parametrize("base,keys,expected", [(1, 4096, 64), (1, 8192, 128), (4, 1024, 16), (1, 2048, 64),
                                                (1, 96, 3), (8, 1024, 16)])
def test_spreading_calls_take_wider_splits_where_blocks_remain(base, keys, expected):
    """With two key tiles per spreading split, a call keeps them where they still make 64 blocks (one base of 4096
    keys: 64 splits instead of 128; four of 1024: 16 instead of 32) and takes one-tile splits where they would not
    (2048 keys: 64 splits of one tile; three tiles: three splits)."""
    assert decode.splits(528, SMS, base, keys, BN, TILE, spread_tiles=2) == expected


@pytest.mark.parametrize("d,heads_q,seqlen_q,spread", [(128, 8, 1, 2), (96, 8, 2, 2), (128, 8, 8, 1), (128, 8, 4, 1),
                                                      (64, 8, 1, 1)])
def test_spreading_splits_are_keyed_by_dtype_head_dim_and_tile_rows(monkeypatch, d, heads_q, seqlen_q, spread):
    """A call's plan reads its spreading split's key tiles from SPREAD_TILES: two on sm_90 at bf16 d = 96 and 128 for
    calls of at most 16 packed query rows (the 16-row tiles), one on the 64-row tiles and at d = 64."""
    class Planned(Exception):
        pass

    def stop(*args):  # the plan's split count, asked before any kernel is loaded
        raise Planned(args[-1])

    monkeypatch.setattr(decode, "splits", stop)
    monkeypatch.setattr(decode, "resident_blocks", lambda spec, target: 4)
    q = torch.empty(1, seqlen_q, heads_q, d, dtype=torch.bfloat16)
    cache = torch.empty(1, 4096, 1, d, dtype=torch.bfloat16)
    sm90 = Target.for_arch("sm_90")
    shape = decode._shape(q, cache, q, None, None, None, PLAIN, sm90)
    with pytest.raises(Planned) as planned:
        decode._call(shape, q, cache, cache, None, PLAIN, 0, None, sm90)
    assert planned.value.args == (spread,)


@pytest.mark.parametrize("base,expected", [(64, 4), (32, 8), (48, 6), (256, 1), (300, 1)])
def test_long_calls_keep_the_same_bytes_in_flight(base, expected):
    """64k keys (1 GiB and more of K and V) as shorter calls: 4 MiB of 16 KiB tiles is 256 blocks, so 64 bases take 4
    splits, 32 take 8 and 48 take 6 (288 blocks); 256 bases keep 4 MiB streaming without splits and take none."""
    assert decode.BYTES_IN_FLIGHT == 4 << 20
    assert decode.splits(528, SMS, base, 65536, BN, TILE) == expected


@pytest.mark.parametrize("base,keys,expected", [(1, 65536, 256), (8, 65536, 32), (8, 4096, 32), (32, 4096, 8),
                                                (256, 4096, 1)])
def test_short_calls_keep_the_bytes_in_flight(base, keys, expected):
    """Up to 512 MiB of K and V: 4 MiB of 16 KiB tiles is 256 blocks, so 8 bases take 32 splits and 32 take 8; a
    single base is held to the most splits, 256 bases to one (no combine)."""
    assert decode.splits(528, SMS, base, keys, BN, TILE) == expected


def test_resident_blocks_follow_shared_memory_and_registers():
    sm90 = Target.for_arch("sm_90")
    res = Resources(registers=196, static_smem=0, spill_bytes=0, scratch_bytes=0)
    # 56576 bytes of shared memory plus the 1 KiB the runtime keeps: four blocks in 233472 bytes.
    assert blocks_per_multiprocessor(res, 32, 56576, sm90) == 4
    assert blocks_per_multiprocessor(res, 64, 0, sm90) == 5  # 196 registers x 64 threads: five blocks by registers
    gfx90a = Target.for_arch("gfx90a")
    amd = Resources(registers=111, static_smem=0, spill_bytes=0, scratch_bytes=0)
    assert blocks_per_multiprocessor(amd, 256, 26368, gfx90a) == 2  # LDS: two 4-wave workgroups per CU
    assert blocks_per_multiprocessor(amd, 256, 65536, gfx90a) == 1  # at least one


def test_resident_blocks_are_kept_per_variant(monkeypatch):
    """Planning a call whose key length is new (once per generated token) reads the attend kernel's resources from
    memory, not from the compiler's cache (which reads and hashes the sources)."""
    compiled = []
    res = Resources(registers=128, static_smem=0, spill_bytes=0, scratch_bytes=0)
    monkeypatch.setattr(variant, "compile_kernel", lambda spec, target: compiled.append(spec) or SimpleNamespace(
        resources=res))
    monkeypatch.setattr(variant, "_resident", {})
    sm90 = Target.for_arch("sm_90")
    spec = decode.select(sm90, "bfloat16", 128, 4).attend
    blocks = variant.resident_blocks(spec, sm90)
    assert blocks == sm90.multiprocessors * blocks_per_multiprocessor(res, spec.tile.threads, spec.smem_bytes, sm90)
    assert variant.resident_blocks(spec, sm90) == blocks
    assert compiled == [spec]


@pytest.mark.parametrize("resident", [132, 528, 1056])
def test_kept_split_choice_is_the_fullest_last_round(resident):
    """The kept choice (by resident blocks, bases and the most splits allowed) is, over every count allowed, the
    one whose last round of resident blocks is fullest, to two decimals, ties going to more splits."""
    for base in (1, 3, 8, 32, 100, 257):
        for most in (1, 2, 17, 64, 256):
            fills = {n: round(base * n / (-(-base * n // resident) * resident), 2) for n in range(1, most + 1)}
            best = max(fills.values())
            assert decode._best_filling(resident, base, most) == max(n for n, f in fills.items() if f == best)


def test_selection_is_kept_per_call_shape(monkeypatch):
    """select answers from memory after the first call of a (target, dtype, head dim, rows, mask build), and gives
    what a fresh selection gives."""
    monkeypatch.setattr(decode, "_selected", {})
    sm90 = Target.for_arch("sm_90")
    first = decode.select(sm90, "bfloat16", 128, 4)
    assert decode.select(sm90, "bfloat16", 128, 4) is first
    assert first == decode._select(sm90, "bfloat16", 128, 4, False)
    wide = decode.select(sm90, "bfloat16", 128, 64)
    assert wide.attend.tile.block_m == 64 and first.attend.tile.block_m == 16
    with pytest.raises(ValueError, match="head dim"):
        decode.select(sm90, "bfloat16", 100, 4)


def test_swizzled_tiles_serve_long_splits_on_nvidia():
    """sm_90 16-bit d = 64 / 128 attend kernels read swizzled shared tiles (unpadded rows, PA_TILE_SWIZZLED) for
    splits of at least SWIZZLED_MIN_TILES key tiles, padded rows for shorter ones; the 64-lane emulation, AMD,
    float32 and d = 96 keep padded rows."""
    sm90 = Target.for_arch("sm_90")
    for dtype, d in (("bfloat16", 128), ("float16", 64)):
        for rows in (4, 64):
            plan = decode.select(sm90, dtype, d, rows)
            assert plan.attend.swizzled and plan.attend.defines["PA_TILE_SWIZZLED"] == 1
            assert plan.attend.smem_bytes == 2 * (plan.attend.tile.block_m + 6 * plan.attend.tile.block_n) * d
            assert not plan.short_attend.swizzled and "PA_TILE_SWIZZLED" not in plan.short_attend.defines
            assert plan.short_attend.tile == replace(plan.attend.tile, swizzled=False)
            bn = plan.attend.tile.block_n
            assert decode.attend_kernel(plan, decode.SWIZZLED_MIN_TILES * bn) is plan.attend
            assert decode.attend_kernel(plan, decode.SWIZZLED_MIN_TILES * bn - 1) is plan.short_attend
            assert plan.short_attend in decode.shipped_variants(sm90) and plan.attend in decode.shipped_variants(sm90)
    for target, dtype, d in ((sm90.with_lanes(64), "bfloat16", 128), (Target.for_arch("gfx90a"), "float16", 128),
                             (sm90, "float32", 128), (sm90, "bfloat16", 96)):
        plan = decode.select(target, dtype, d, 4)
        assert not plan.attend.swizzled and plan.short_attend == plan.attend
        assert "PA_TILE_SWIZZLED" not in plan.attend.defines


@pytest.mark.parametrize("n_splits", [2, 3, 4, 5, 8, 16, 31, 32, 33, 64, 65, 100, 128, 256])
def test_combine_rows_take_few_splits_per_slot(n_splits):
    """A call takes the first combine layout whose most splits it does not exceed; the slots of a row are a power of
    two, few enough for the layout's block, and take about the layout's splits per slot each (more where a block's
    slots run out), with no slot more than needed."""
    layout = decode.combine_layout(n_splits)
    most, threads, per_slot = decode.COMBINE_LAYOUTS[layout]
    assert n_splits <= most and (layout == 0 or n_splits > decode.COMBINE_LAYOUTS[layout - 1][0])
    groups = decode.combine_groups(n_splits)
    most_slots = threads // decode.COMBINE_ROW_LANES
    assert groups & (groups - 1) == 0 and 1 <= groups <= most_slots
    assert -(-n_splits // groups) <= per_slot or groups == most_slots
    assert groups == 1 or -(-n_splits // (groups // 2)) > per_slot


def test_combine_layouts_cover_every_split_count():
    """The layouts' most splits grow and the last reaches MAX_SPLITS; every layout has a combine kernel of its
    threads in a plan (sm_90, bfloat16, d = 128), and every one ships."""
    mosts = [most for most, _, _ in decode.COMBINE_LAYOUTS]
    assert mosts == sorted(set(mosts)) and mosts[-1] == decode.MAX_SPLITS
    sm90 = Target.for_arch("sm_90")
    plan = decode.select(sm90, "bfloat16", 128)
    assert [c.tile.threads for c in plan.combines] == [threads for _, threads, _ in decode.COMBINE_LAYOUTS]
    assert all(c.stage == "combine" and c in decode.shipped_variants(sm90) for c in plan.combines)
