"""NVRTC builds of the shipped variants (no spills, cubin records, Hopper warpgroup MMA, wave64 emulation) and of the
probe kernels, and compile errors (no GPU needed).

The variants (``portattn.tools.testing.compile_sample``): for sm_80 one per kernel function and dtype, for sm_90
and the emulation one per kernel function (the largest head dim with extended masks, other ones for the
emulation); every one with ``PORTATTN_FULL_MATRIX=1``."""

import os
import shutil

import pytest

import portattn.runtime.sources as sources
from portattn import CompileError
from portattn.kernels import shipped_variants
from portattn.kernels.probes import mfma_probe, prelude_probe
from portattn.runtime.cache import DiskCache
from portattn.runtime.compiler import clear_memory_cache, compile_kernel, compile_many
from portattn.runtime.resources import nvidia_blocks_per_sm
from portattn.runtime.target import Target
from portattn.tools.testing import compile_sample

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed")

ARCHS = ("sm_80", "sm_90")


@pytest.fixture
def cache(tmp_path):
    clear_memory_cache()
    yield DiskCache(tmp_path / "cache")
    clear_memory_cache()


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """``builds(target)``: the sampled variants of ``target`` with their kernels, compiled once for this module, as
    many at a time as there are CPUs, into a cache of its own (nothing comes from an earlier build)."""
    cache = DiskCache(tmp_path_factory.mktemp("builds") / "cache")
    built = {}

    def build(target):
        if target not in built:
            clear_memory_cache()
            # sm_80 (compiled here only) per kernel function and dtype, sm_90 and the emulation (also compiled by the
            # GPU tests) per kernel function
            specs = compile_sample(shipped_variants(target), rotation=1 if target.emulated else 0,
                                   by_dtype=target.arch == "sm_80")
            kernels = compile_many(specs, target, cache, jobs=os.cpu_count() or 1)
            for spec, kernel in zip(specs, kernels):
                if isinstance(kernel, Exception):
                    pytest.fail(f"{spec.label} on {target}: {kernel}")
                assert not kernel.from_disk
            built[target] = list(zip(specs, kernels))
        return built[target]

    yield build
    clear_memory_cache()


@pytest.mark.parametrize("arch", ARCHS)
def test_every_variant_compiles_without_spills(arch, builds):
    target = Target.for_arch(arch)
    assert {s.head_dim for s in shipped_variants(target)} == {32, 64, 96, 128, 256}
    for spec, k in builds(target):
        res = k.resources
        assert k.binary[:4] == b"\x7fELF", "NVRTC must give a cubin, not PTX"
        assert res.spill_bytes == 0 and res.scratch_bytes == 0, f"{spec.label} on {arch}: {res}"
        assert 0 < res.registers <= 255
        assert res.static_smem + spec.smem_bytes <= target.smem_per_block
        # registers and shared memory allow the blocks per SM the tile asks for (at least one)
        blocks = nvidia_blocks_per_sm(res, spec.block_threads, spec.smem_bytes, target)
        assert blocks >= spec.tile.min_blocks, f"{spec.label} on {arch}: {res}"
        if (spec.kernel == "ws" and spec.tile.threads > 256) or spec.block_threads != spec.tile.threads:
            # The warp-specialized kernels with several computing warpgroups, and the kernels with a helper
            # warpgroup, move registers between warpgroups (setmaxnreg) within what the block holds at launch,
            # counting on the launch bound's full 65536 / threads per thread: ptxas must use them all, or a
            # warpgroup asking for more would wait forever.
            assert res.registers == 65536 // spec.block_threads // 8 * 8, f"{spec.label}: {res}"


def test_hopper_variants_use_warpgroup_mma(builds):
    """float16 / bfloat16 at d = 64, 96, 128 and 256 and float32 at d = 64 and 128 run the warpgroup MMA on sm_90:
    built for sm_90a, and ptxas keeps the asynchronous matrix instructions in flight (it reports where it has to
    serialize them)."""
    hopper = Target.for_arch("sm_90")
    expected = {(dt, d) for dt in ("float16", "bfloat16") for d in (64, 96, 128, 256)}
    expected |= {("float32", 64), ("float32", 128)}
    assert {(s.dtype, s.head_dim) for s in shipped_variants(hopper) if s.tile.warpgroup_mma} == expected
    built = [(s, k) for s, k in builds(hopper) if s.tile.warpgroup_mma]
    assert built
    for spec, kernel in built:
        assert spec.defines["PA_MMA_WGMMA"] == 1 and spec.tile.threads % 128 == 0
        assert kernel.arch == "sm_90a"
        assert "Potential Performance Loss" not in kernel.log, kernel.log
    assert not any(s.tile.warpgroup_mma for s in shipped_variants(Target.for_arch("sm_80")))


def test_wave64_emulation_variants_compile(builds, cache):
    """The emulated 64-lane (gfx90a mapping) builds of the variants, and the prelude probe at both lane counts."""
    native = Target.for_arch("sm_90")
    target = native.with_lanes(64)
    for spec, kernel in builds(target):  # a verification build: its speed (and spills) do not matter
        assert spec.emulated and kernel.resources.registers > 0
    for t in (native, target):
        assert compile_kernel(prelude_probe(t), t, cache).binary[:4] == b"\x7fELF"


def test_mfma_probe_compiles_under_wave64_emulation(cache):
    """The MFMA building blocks (pa_mfma.cuh) build for the emulated 64-lane target, and refuse 32-lane builds."""
    from portattn.tools.fragments import INSTRUCTIONS

    target = Target.for_arch("sm_90").with_lanes(64)
    assert target.emulated
    probe = mfma_probe(target, next(iter(INSTRUCTIONS)))
    assert probe.defines["PA_WARP_SIZE"] == 64 and probe.defines["PA_EMULATE_WAVE64"] == 1
    kernel = compile_kernel(probe, target, cache)
    assert kernel.binary[:4] == b"\x7fELF"
    assert kernel.resources.spill_bytes == 0 and kernel.resources.scratch_bytes == 0
    for lay in INSTRUCTIONS.values():
        assert f"pa_mfma_probe_{lay.name}".encode() in kernel.binary

    native = Target.for_arch("sm_90")
    with pytest.raises(CompileError, match="64-lane waves"):
        compile_kernel(mfma_probe(native, next(iter(INSTRUCTIONS))), native, cache)


def test_planted_bug_define_only_from_tests():
    for arch in ("sm_90", "gfx90a"):
        for spec in shipped_variants(Target.for_arch(arch)):
            assert not any(k.startswith("PA_TESTING") for k in spec.defines), spec.label


@pytest.fixture
def src_copy(tmp_path, monkeypatch):
    """A private copy of the CUDA source tree that compile_kernel reads from."""
    root = tmp_path / "src_cuda"
    shutil.copytree(sources.source_dir("cuda"), root)
    monkeypatch.setattr(sources, "source_dir", lambda vendor: root)
    return root


def test_compile_error_carries_log_and_source(src_copy, cache):
    target = Target.for_arch("sm_90")
    spec = shipped_variants(target)[0]
    kernel = src_copy / spec.filename
    lines = kernel.read_text().splitlines()
    lines.insert(30, "this is not C++;")
    kernel.write_text("\n".join(lines))
    with pytest.raises(CompileError) as info:
        compile_kernel(spec, target, cache)
    err = info.value
    assert err.backend == "nvrtc" and err.arch == "sm_90"
    assert "--gpu-architecture=sm_90" in err.options and "-DPA_HEAD_DIM=32" in err.options
    assert "error" in err.log and f"{spec.filename}(31)" in err.log
    assert "31 | this is not C++;" in err.dump()
    assert "sm_90" in str(err) and "error" in str(err)


@pytest.mark.parametrize("arch", ARCHS)
def test_cubin_records_agree_with_ptxas_report(arch, builds):
    from portattn.runtime.resources import parse_cubin, parse_ptxas_log

    compared = 0
    for spec, kernel in builds(Target.for_arch(arch)):
        if "Used" not in kernel.log:
            continue  # NVRTC 13.0 leaves the ptxas report out of the log after a process's first builds
        assert parse_cubin(kernel.binary, spec.function) == parse_ptxas_log(kernel.log), spec.label
        compared += 1
    if not compared:
        pytest.skip("this NVRTC returned no ptxas report to compare with")
