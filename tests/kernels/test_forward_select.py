"""The forward's tile tables and variant choice on each arch family (and the backward's for the extended masks), with
fake devices (no GPU needed)."""

from dataclasses import replace

import pytest

from portattn import UnsupportedTargetError
from portattn.kernels import backward
from portattn.kernels.forward import (
    WS_TILES,
    WS_TILES_BY_LENGTH,
    WS_TILES_EXT,
    Lengths,
    select,
    shipped_variants,
)
from portattn.kernels.variant import HEAD_DIMS, TileConfig
from portattn.runtime.target import KNOWN_ARCHS, Target

EXPECTED = {  # arch -> (vendor, lanes, family)
    "sm_80": ("cuda", 32, "sm80"),
    "sm_90": ("cuda", 32, "sm90"),
    "gfx90a": ("hip", 64, "cdna2"),
    "gfx908": ("hip", 64, "cdna1"),
    "gfx942": ("hip", 64, "cdna3"),
    "gfx950": ("hip", 64, "cdna4"),
    "gfx1100": ("hip", 32, "rdna3"),
    "gfx1201": ("hip", 32, "rdna4"),
}


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_detect_and_select(fake_device, arch):
    vendor, lanes, fam = EXPECTED[arch]
    target = fake_device(arch, warp_size=lanes)
    assert (target.vendor, target.arch, target.lanes, target.family) == (vendor, arch, lanes, fam)
    for d in HEAD_DIMS:
        spec = select(target, "float32", d)
        assert spec.defines["PA_WARP_SIZE"] == lanes and spec.defines["PA_HEAD_DIM"] == d
        assert spec.smem_bytes <= target.smem_per_block
        assert spec.tile.threads % lanes == 0
    dtypes = {"cdna1": ("float32", "float16"), "rdna3": ("float32",), "rdna4": ("float32",)}.get(
        fam, ("float32", "float16", "bfloat16"))
    chosen = {(dt, d): select(target, dt, d) for dt in dtypes for d in HEAD_DIMS}
    # Matrix units wherever the family has them, except float32 d = 256 (NVIDIA: no tile without register spills;
    # CDNA: no tile within 64 KiB of LDS).
    simt_only = {(dt, d) for dt, d in chosen if fam.startswith("rdna") or (dt, d) == ("float32", 256)}
    assert {key for key, spec in chosen.items() if spec.kernel == "simt"} == simt_only
    variants = shipped_variants(target)
    assert set(chosen.values()) <= set(variants)
    # Beyond the chosen ones: the simt kernel where float32 has a matrix-unit one, and the matrix-unit kernel where
    # the warp-specialized one is chosen (both serve a forced kernel).
    ws = {key for key, spec in chosen.items() if spec.kernel == "ws"}
    assert {(s.kernel, s.dtype, s.head_dim) for s in variants} - {(c.kernel, *k) for k, c in chosen.items()} == {
        ("simt", "float32", d) for d in HEAD_DIMS if ("float32", d) not in simt_only} | {("mma", *k) for k in ws}
    hopper_ws = {(dt, d) for dt in ("float16", "bfloat16") for d in (64, 96, 128, 256)}
    hopper_ws |= {("float32", 64), ("float32", 128)}
    assert ws == (hopper_ws if fam == "sm90" else set())


@pytest.mark.parametrize("arch", ["gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"])
def test_amd_tiles_fit_two_waves_per_simd_by_lds(arch):
    target = Target.for_arch(arch)
    simds = 4  # SIMDs sharing a CU's (CDNA) or a workgroup processor's (RDNA) LDS
    for spec in shipped_variants(target):
        waves = spec.tile.threads // target.lanes
        groups = target.smem_per_multiprocessor // spec.smem_bytes
        wanted = 2 * simds
        if spec.kernel == "mma":
            # Each wave keeps its 16 query rows in LDS: where eight waves' rows plus one 16-key K and V tile exceed
            # the CU's LDS (16-bit d = 256, float32 d = 128 on 64 KiB), no tile reaches two waves per SIMD.
            eight = replace(spec, tile=TileConfig(block_m=16 * wanted, block_n=16, threads=wanted * 64))
            if eight.smem_bytes > target.smem_per_multiprocessor:
                assert target.smem_per_multiprocessor == 65536 and spec.tile.threads == 256, spec.label
                wanted = simds
        assert groups * waves >= wanted, f"{spec.label}: LDS alone allows only {groups * waves} waves per CU"


def test_unknown_arch_is_refused_with_the_supported_list(fake_device):
    target = fake_device("sm_75")
    with pytest.raises(UnsupportedTargetError, match="no kernel configuration for arch 'sm_75'; supported: sm_80"):
        select(target, "float32", 64)
    assert set(KNOWN_ARCHS) == set(EXPECTED) | {"sm_86", "sm_89"}


def test_emulated_target_executes_the_gfx90a_mapping():
    native = Target.for_arch("sm_90")
    emulated = native.with_lanes(64)
    assert emulated.with_lanes(None) == native and not native.emulated
    assert emulated.family == "cdna2" and "emulated" in str(emulated)
    for d in HEAD_DIMS:
        spec, amd = select(emulated, "float32", d), select(Target.for_arch("gfx90a"), "float32", d)
        assert spec.tile == amd.tile and spec.lanes == 64 and spec.emulated
        assert spec.defines["PA_EMULATE_WAVE64"] == 1 and spec.defines["PA_WARP_SIZE"] == 64
        assert "PA_EMULATE_WAVE64" not in select(native, "float32", d).defines
        assert "PA_EMULATE_WAVE64" not in amd.defines
    with pytest.raises(UnsupportedTargetError, match="lanes=16"):
        native.with_lanes(16)


def test_hopper_plain_16bit_calls_take_the_warp_specialized_kernel():
    hopper = Target.for_arch("sm_90")
    for dtype in ("float16", "bfloat16"):
        for d in (64, 96, 128, 256):
            spec = select(hopper, dtype, d)
            assert spec.kernel == "ws" and spec.function == "pa_flash_fwd_ws" and spec == select(hopper, dtype, d, "ws")
            assert spec.defines["PA_TMA_STAGES"] == spec.tile.stages and spec.defines["PA_MMA_WGMMA"] == 1
            assert spec.defines["PA_Q_STAGES"] == spec.tile.q_stages
            # extended masks and a forced matrix-unit kernel keep the matrix-unit kernel
            assert select(hopper, dtype, d, mask_ext=True).kernel == select(hopper, dtype, d, "mma").kernel == "mma"
            with pytest.raises(NotImplementedError, match="warp-specialized"):
                select(hopper, dtype, d, "ws", mask_ext=True)
            with pytest.raises(ValueError, match="one block per SM"):
                replace(spec, tile=replace(spec.tile, min_blocks=2)).defines
    with pytest.raises(NotImplementedError, match="no ws kernel"):
        select(Target.for_arch("sm_80"), "float16", 128, "ws")
    assert len(set(shipped_variants(hopper))) == len(shipped_variants(hopper))


def test_windows_and_packed_sequences_without_score_modifiers_take_the_hopper_kernels():
    """Calls with windows or packed sequences but no score modifiers take the warp-specialized forward (every
    head dim it has) and the warpgroup-MMA backward in builds without the modifiers (PA_SCORE_MOD 0); calls with
    modifiers keep the extended-mask builds of the other kernels, and other targets are unchanged."""
    hopper, ampere, mi210 = Target.for_arch("sm_90"), Target.for_arch("sm_80"), Target.for_arch("gfx90a")
    for dtype in ("float16", "bfloat16", "float32"):
        for d in HEAD_DIMS:
            modified = select(hopper, dtype, d, mask_ext=True)
            assert modified.score_mods and modified.kernel != "ws" and "PA_SCORE_MOD" not in modified.defines
            lengths = select(hopper, dtype, d, mask_ext=True, seqlen=4096, score_mods=False)
            assert ((dtype, d) in WS_TILES_EXT["sm90"]) == ((dtype, d) in WS_TILES["sm90"])
            if (dtype, d) in WS_TILES_EXT["sm90"]:
                assert lengths.kernel == "ws" and not lengths.score_mods and lengths.mask_ext
                assert lengths.defines["PA_MASK_EXT"] == 1 and lengths.defines["PA_SCORE_MOD"] == 0
                plain = select(hopper, dtype, d).tile  # the short-call row, also for long calls, or shorter keys
                assert lengths.tile == replace(plain, block_n=lengths.tile.block_n)
                assert lengths.tile.block_n <= plain.block_n
                assert lengths in shipped_variants(hopper) and "no score mods" in lengths.label
            else:
                assert lengths == modified
                with pytest.raises(NotImplementedError, match="windows or packed sequences"):
                    select(hopper, dtype, d, "ws", mask_ext=True, score_mods=False)
            for other in (ampere, mi210):
                assert select(other, dtype, d, mask_ext=True, score_mods=False) == select(other, dtype, d,
                                                                                          mask_ext=True)
        with pytest.raises(NotImplementedError, match="score modifiers"):
            select(hopper, dtype, 128, "ws", mask_ext=True)
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            plan = backward.select(hopper, dtype, d, mask_ext=True, score_mods=False)
            assert plan.dkdv.tile.warpgroup_mma and plan.dkdv.tile == backward.select(hopper, dtype, d).dkdv.tile
            assert all(not s.score_mods for s in plan.specs[1:]) and plan.prep == backward.select(hopper, dtype, d).prep
            assert set(plan.specs) <= set(backward.shipped_variants(hopper))
        # with the modifiers d = 128 keeps the mma.sync kernel (the warpgroup MMA one spills)
        assert not backward.select(hopper, dtype, 128, mask_ext=True).dkdv.tile.warpgroup_mma
    for arch in (ampere, mi210):
        assert backward.select(arch, "float16", 64, mask_ext=True, score_mods=False) == backward.select(
            arch, "float16", 64, mask_ext=True)
    with pytest.raises(ValueError, match="extended masks"):
        replace(select(hopper, "float16", 64), score_mods=False)


def test_backward_dq_units_one_at_a_time_only_where_asked_and_applicable():
    """sm86's extended-mask dK/dV builds at 16-bit d = 128 take dQ's units one at a time (their build says so); the
    plain builds pair them. A spec asking for that beyond the mma.sync / MFMA dK/dV kernel is refused."""
    sm86, hopper = Target.for_arch("sm_86"), Target.for_arch("sm_90")
    for dtype in ("float16", "bfloat16"):
        ext = backward.select(sm86, dtype, 128, mask_ext=True).dkdv
        assert ext.tile.dq_single and ext.defines["PA_DQ_SINGLE"] == 1 and "dQ units single" in ext.label
        plain = backward.select(sm86, dtype, 128).dkdv
        assert not plain.tile.dq_single and "PA_DQ_SINGLE" not in plain.defines
    for spec in (backward.select(hopper, "bfloat16", 128).dkdv, backward.select(sm86, "float16", 128).dq,
                 backward.select(sm86, "float32", 256).dkdv):
        with pytest.raises(ValueError, match="dq_single"):
            replace(spec, tile=replace(spec.tile, dq_single=True))


def test_bulk_output_stores_go_with_two_q_buffers():
    """The warp-specialized kernel stores its output through the job's Q buffer (bulk tensor stores) exactly where
    it has two Q buffers or more and 16-bit inputs, and its build says so; d = 64 (up to 4095 rows without a mask)
    and 128 do."""
    hopper = Target.for_arch("sm_90")
    chosen = [select(hopper, dtype, d, seqlen=n, causal=causal) for dtype in ("float16", "bfloat16", "float32")
              for d in HEAD_DIMS for n in (1, 512, 2048, 8192) for causal in (False, True)]
    for spec in {s for s in chosen if s.kernel == "ws"}:
        bulk = spec.dtype != "float32" and spec.tile.q_stages >= 2
        assert spec.stores_o_bulk == bulk and spec.defines["PA_STORE_O_BULK"] == int(bulk), spec.label
    for dtype in ("float16", "bfloat16"):
        assert select(hopper, dtype, 128).stores_o_bulk and select(hopper, dtype, 64).stores_o_bulk
        assert select(hopper, dtype, 64, seqlen=4095).stores_o_bulk
        assert not select(hopper, dtype, 64, seqlen=4096).stores_o_bulk
        assert not select(hopper, dtype, 64, seqlen=2048, causal=True).stores_o_bulk
    assert not select(hopper, "float32", 64).stores_o_bulk
    assert not select(hopper, "float16", 128, "mma").stores_o_bulk


def test_lengths_take_their_band():
    band = Lengths(257, 4095, causal=False)
    assert band.take(257, False) and band.take(4095, False)
    assert not band.take(256, False) and not band.take(4096, False) and not band.take(1000, True)
    assert Lengths(2048).take(1 << 30, True) and Lengths(2048).take(2048, False) and not Lengths(2048).take(2047, True)


def test_length_rows_take_their_calls():
    """Hopper d = 64: calls of up to 128 (query rows, and keys a row sees) take four K/V stages and three Q buffers;
    without a mask 257-4095 the three-warpgroup row with two Q buffers, from 4096 (causal from 2048) with one; d = 96:
    160-key tiles from 2048, with or without a mask; d = 128: 160-key tiles from 4096; d = 256: 32-key tiles with two
    Q buffers up to 256, causal calls 64-key tiles from 257 to 512. Other head dims, other lengths, forced and
    extended-mask kernels and other targets ignore the length."""
    hopper, ampere = Target.for_arch("sm_90"), Target.for_arch("sm_80")
    shipped = shipped_variants(hopper)
    for dtype in ("float16", "bfloat16"):
        plain = select(hopper, dtype, 64)
        assert plain.kernel == "ws" and (plain.tile.block_m, plain.tile.stages, plain.tile.q_stages) == (128, 3, 2)
        short = select(hopper, dtype, 64, seqlen=128)
        assert (short.tile.block_m, short.tile.stages, short.tile.q_stages) == (128, 4, 3) and short.stores_o_bulk
        medium, long = select(hopper, dtype, 64, seqlen=257), select(hopper, dtype, 64, seqlen=4096)
        assert long.tile.block_m == medium.tile.block_m == 192 and long.block_threads == 512
        assert (medium.tile.q_stages, long.tile.q_stages) == (2, 1)
        assert medium.tile == replace(long.tile, q_stages=2)
        for causal in (False, True):
            assert select(hopper, dtype, 64, seqlen=1, causal=causal) == short
            assert select(hopper, dtype, 64, seqlen=129, causal=causal) == plain
        assert select(hopper, dtype, 64, seqlen=256) == plain and select(hopper, dtype, 64, seqlen=4095) == medium
        assert select(hopper, dtype, 64, seqlen=1 << 20) == long == select(hopper, dtype, 64, "ws", seqlen=1 << 20)
        assert select(hopper, dtype, 64, seqlen=2047, causal=True) == plain
        assert select(hopper, dtype, 64, seqlen=2048, causal=True) == long
        assert {plain, short, medium, long} <= set(shipped)
        assert select(hopper, dtype, 64, "mma", seqlen=4096) == select(hopper, dtype, 64, "mma")
        assert select(hopper, dtype, 64, mask_ext=True, seqlen=4096) == select(hopper, dtype, 64, mask_ext=True)
        assert select(ampere, dtype, 64, seqlen=4096) == select(ampere, dtype, 64)

        short96, long96 = select(hopper, dtype, 96), select(hopper, dtype, 96, seqlen=2048)
        assert (short96.tile.block_n, long96.tile.block_n) == (128, 160)
        assert short96.stores_o_bulk and long96.stores_o_bulk and long96.smem_bytes <= hopper.smem_per_block
        for causal in (False, True):
            assert select(hopper, dtype, 96, seqlen=2048, causal=causal) == long96
            assert select(hopper, dtype, 96, seqlen=2047, causal=causal) == short96 == select(hopper, dtype, 96,
                                                                                                seqlen=1)
        assert long96 in shipped
        assert select(hopper, dtype, 96, mask_ext=True, seqlen=2048) == select(hopper, dtype, 96, mask_ext=True)
        assert select(ampere, dtype, 96, seqlen=2048) == select(ampere, dtype, 96)

        plain256, short256 = select(hopper, dtype, 256), select(hopper, dtype, 256, seqlen=256)
        assert short256.kernel == "ws" and short256.tile.block_n == 32 and short256.tile.q_stages == 2
        assert short256.stores_o_bulk and short256.smem_bytes <= hopper.smem_per_block
        for causal in (False, True):
            assert select(hopper, dtype, 256, seqlen=1, causal=causal) == short256
            assert select(hopper, dtype, 256, seqlen=513, causal=causal) == plain256
        causal256 = select(hopper, dtype, 256, seqlen=257, causal=True)
        assert causal256 == select(hopper, dtype, 256, seqlen=512, causal=True)
        assert (causal256.tile.block_n, causal256.tile.stages) == (64, 2)
        assert causal256.smem_bytes <= hopper.smem_per_block
        assert select(hopper, dtype, 256, seqlen=257) == select(hopper, dtype, 256, seqlen=512) == plain256
        assert select(hopper, dtype, 256, seqlen=1 << 20) == plain256
        assert {plain256, short256, causal256} <= set(shipped)
        assert select(hopper, dtype, 256, "mma", seqlen=1) == select(hopper, dtype, 256, "mma")
        assert select(hopper, dtype, 256, mask_ext=True, seqlen=1) == select(hopper, dtype, 256, mask_ext=True)
        assert select(ampere, dtype, 256, seqlen=1) == select(ampere, dtype, 256)
        short128, long128 = select(hopper, dtype, 128), select(hopper, dtype, 128, seqlen=4096)
        assert (short128.tile.block_n, long128.tile.block_n) == (128, 160)
        assert long128.stores_o_bulk and long128.smem_bytes <= hopper.smem_per_block and long128 in shipped
        for causal in (False, True):
            assert select(hopper, dtype, 128, seqlen=1 << 20, causal=causal) == long128
            for n in (1, 128, 4095):
                assert select(hopper, dtype, 128, seqlen=n, causal=causal) == short128
        assert select(hopper, dtype, 128, mask_ext=True, seqlen=4096) == select(hopper, dtype, 128, mask_ext=True)
        assert select(ampere, dtype, 128, seqlen=4096) == select(ampere, dtype, 128)
    assert select(hopper, "float32", 64, seqlen=4096) == select(hopper, "float32", 64)
    assert select(hopper, "float32", 128, seqlen=1) == select(hopper, "float32", 128)
    # every band's row is a shipped variant that fits
    for (dtype, d), bands in WS_TILES_BY_LENGTH["sm90"].items():
        for lengths, tile in bands:
            spec = select(hopper, dtype, d, seqlen=lengths.first, causal=bool(lengths.causal))
            assert spec.tile == tile and spec in shipped and spec.smem_bytes <= hopper.smem_per_block


def test_min_blocks_reaches_the_launch_bounds():
    hopper = Target.for_arch("sm_90")
    two = select(hopper, "float16", 64, "mma")
    assert two.defines["PA_MIN_BLOCKS"] == two.tile.min_blocks == 2
    assert select(hopper, "float16", 128, "mma").defines["PA_MIN_BLOCKS"] == 1
    assert "PA_MIN_BLOCKS" not in select(hopper, "float32", 64, "simt").defines
    assert ",2/SM" in select(hopper, "bfloat16", 64, "mma").label


def test_smem_limit_is_enforced(fake_device):
    small = fake_device("sm_90", shared_memory_per_block_optin=48 * 1024)
    with pytest.raises(UnsupportedTargetError, match="needs 150528 bytes of shared memory"):
        select(small, "float32", 256)
    with pytest.raises(UnsupportedTargetError, match="needs 230528 bytes of shared memory"):
        select(small, "float32", 128)
    with pytest.raises(UnsupportedTargetError, match="needs 101376 bytes of shared memory"):
        select(small, "float32", 128, "mma")


def test_unsupported_dtype_and_head_dim():
    target = Target.for_arch("sm_90")
    assert select(target, "bfloat16", 64).defines["PA_BF16"] == 1
    assert "PA_BF16" not in select(target, "float16", 64).defines
    with pytest.raises(NotImplementedError, match="bfloat16 attention has no kernel for gfx908 at head dim 64"):
        select(Target.for_arch("gfx908"), "bfloat16", 64)
    with pytest.raises(NotImplementedError, match="float16 attention has no simt kernel for sm_90"):
        select(target, "float16", 64, kernel="simt")
    with pytest.raises(ValueError, match="kernel must be one of mma, simt"):
        select(target, "float32", 64, kernel="tensor")
    with pytest.raises(NotImplementedError, match="float64"):
        select(target, "float64", 64)
    with pytest.raises(ValueError, match="head dim 80 is not supported"):
        select(target, "float32", 80)
