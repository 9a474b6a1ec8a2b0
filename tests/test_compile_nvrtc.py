"""NVRTC builds of every shipped variant, the compile cache and compile errors (no GPU needed)."""
import shutil

import pytest

import portattn.sources as sources
from portattn import CompileError
from portattn.compile import clear_memory_cache, compile_kernel
from portattn.compile.cache import DiskCache
from portattn.resources import nvidia_blocks_per_sm
from portattn.select import KernelSpec, TileConfig, shipped_variants
from portattn.target import Target

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed")

ARCHS = ("sm_80", "sm_90")


@pytest.fixture
def cache(tmp_path):
    clear_memory_cache()
    yield DiskCache(tmp_path / "cache")
    clear_memory_cache()


@pytest.mark.parametrize("arch", ARCHS)
def test_every_variant_compiles_without_spills(arch, cache):
    target = Target.for_arch(arch)
    specs = shipped_variants(target)
    assert {s.head_dim for s in specs} == {32, 64, 96, 128, 256}
    for spec in specs:
        k = compile_kernel(spec, target, cache)
        res = k.resources
        assert k.binary[:4] == b"\x7fELF", "NVRTC must give a cubin, not PTX"
        assert res.spill_bytes == 0 and res.scratch_bytes == 0, f"{spec.label} on {arch}: {res}"
        assert 0 < res.registers <= 255
        assert res.static_smem + spec.smem_bytes <= target.smem_per_block
        # registers and shared memory allow the blocks per SM the tile asks for (at least one)
        assert nvidia_blocks_per_sm(res, spec, target) >= spec.tile.min_blocks, f"{spec.label} on {arch}: {res}"


def test_hopper_variants_use_warpgroup_mma(cache):
    """float16 / bfloat16 at d = 64 and 128 run the warpgroup MMA on sm_90: built for sm_90a, and ptxas keeps the
    asynchronous matrix instructions in flight (it reports where it has to serialize them)."""
    target = Target.for_arch("sm_90")
    specs = [s for s in shipped_variants(target) if s.tile.warpgroup_mma]
    assert {(s.dtype, s.head_dim) for s in specs} == {(dt, d) for dt in ("float16", "bfloat16") for d in (64, 128)}
    for spec in specs:
        assert spec.defines["PA_MMA_WGMMA"] == 1 and spec.tile.threads % 128 == 0
        kernel = compile_kernel(spec, target, cache)
        assert kernel.arch == "sm_90a"
        assert "Potential Performance Loss" not in kernel.log, kernel.log
    assert not any(s.tile.warpgroup_mma for s in shipped_variants(Target.for_arch("sm_80")))


def test_wave64_emulation_variants_compile(cache):
    """The emulated 64-lane (gfx90a mapping) builds of every variant, and the prelude probe at both lane counts."""
    native = Target.for_arch("sm_90")
    target = native.with_lanes(64)
    for spec in shipped_variants(target):  # a verification build: its speed (and spills) do not matter
        assert spec.emulated and compile_kernel(spec, target, cache).resources.registers > 0
    for t in (native, target):
        probe = KernelSpec("pa_prelude_probe.cu", "pa_prelude_probe", "float32", 0, TileConfig(0, 0, 128), t.lanes,
                           t.emulated)
        assert compile_kernel(probe, t, cache).binary[:4] == b"\x7fELF"


def test_mfma_probe_compiles_under_wave64_emulation(cache):
    """The MFMA building blocks (pa_mfma.cuh) build for the emulated 64-lane target, and refuse 32-lane builds."""
    from portattn.fragments import INSTRUCTIONS

    target = Target.for_arch("sm_90").with_lanes(64)
    assert target.emulated
    first = f"pa_mfma_probe_{next(iter(INSTRUCTIONS))}"
    probe = KernelSpec("pa_mfma_probe.cu", first, "float32", 0, TileConfig(0, 0, 256), 64, True)
    assert probe.defines["PA_WARP_SIZE"] == 64 and probe.defines["PA_EMULATE_WAVE64"] == 1
    kernel = compile_kernel(probe, target, cache)
    assert kernel.binary[:4] == b"\x7fELF"
    assert kernel.resources.spill_bytes == 0 and kernel.resources.scratch_bytes == 0
    for lay in INSTRUCTIONS.values():
        assert f"pa_mfma_probe_{lay.name}".encode() in kernel.binary

    native = Target.for_arch("sm_90")
    narrow = KernelSpec("pa_mfma_probe.cu", first, "float32", 0, TileConfig(0, 0, 256), 32)
    with pytest.raises(CompileError, match="64-lane waves"):
        compile_kernel(narrow, native, cache)


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


def _spec() -> tuple[KernelSpec, Target]:
    target = Target.for_arch("sm_90")
    return shipped_variants(target)[0], target


def test_cache_miss_then_hit_then_invalidation(src_copy, cache):
    spec, target = _spec()
    first = compile_kernel(spec, target, cache)
    assert not first.from_disk and len(cache.entries()) == 1
    assert compile_kernel(spec, target, cache) is first  # in-memory
    clear_memory_cache()
    again = compile_kernel(spec, target, cache)
    assert again.from_disk and again.binary == first.binary and again.key == first.key
    assert again.resources == first.resources
    # A change in any header invalidates the entry.
    header = src_copy / "pa_prelude.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    changed = compile_kernel(spec, target, cache)
    assert changed.key != first.key and not changed.from_disk and len(cache.entries()) == 2


def test_cache_key_covers_options_and_arch(cache):
    spec, target = _spec()
    a = compile_kernel(spec, target, cache)
    b = compile_kernel(spec, Target.for_arch("sm_80"), cache)
    other = KernelSpec(spec.filename, spec.function, spec.dtype, 64, spec.tile, spec.lanes)
    c = compile_kernel(other, target, cache)
    assert len({a.key, b.key, c.key}) == 3


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_corrupted_entry_is_recompiled(src_copy, cache, damage):
    spec, target = _spec()
    good = compile_kernel(spec, target, cache)
    path = cache.path(good.key)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 3]
    else:
        data = bytearray(b"not a cache entry")
    path.write_bytes(bytes(data))
    assert cache.get(good.key) is None
    clear_memory_cache()
    again = compile_kernel(spec, target, cache)
    assert not again.from_disk and again.binary == good.binary
    assert cache.get(good.key) is not None, "the entry is rewritten whole"


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTATTN_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert DiskCache().directory == tmp_path / "elsewhere"


def test_compile_error_carries_log_and_source(src_copy, cache):
    spec, target = _spec()
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
def test_cubin_records_agree_with_ptxas_report(arch):
    from portattn.compile import nvrtc
    from portattn.resources import parse_cubin, parse_ptxas_log

    compared = 0
    for spec in shipped_variants(Target.for_arch(arch)):
        build_arch = nvrtc.build_arch(arch, spec.defines)
        opts = nvrtc.options(build_arch, spec.defines)
        binary, log = nvrtc.compile_source(sources.read_source("cuda", spec.filename), build_arch, opts)
        if "Used" not in log:
            continue  # NVRTC 13.0 leaves the ptxas report out of the log after a process's first builds
        assert parse_cubin(binary, spec.function) == parse_ptxas_log(log), spec.label
        compared += 1
    if not compared:
        pytest.skip("this NVRTC returned no ptxas report to compare with")
