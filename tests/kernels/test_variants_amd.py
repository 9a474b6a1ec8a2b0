"""Shipped kernel variants (``portattn.kernels.shipped_variants``: every family) compile from src_hip/ with every
ROCm hiprtc toolchain present, for every AMD target whose processor that toolchain's compiler knows, and fit the
hardware.

Which variants: with ``PORTATTN_FULL_MATRIX=1`` every one, for every (toolchain, target); otherwise the sample of
``_sample`` (about 80 variants and every probe). One hiprtc compile takes 1-30 s on a two-core machine, so the full
matrix (about 1900 compiles) takes hours there.

Toolchains: this machine's ROCm and the chroot toolchains of scripts/install-rocm-chroots.sh (root only). Per
(toolchain, target, variant), from the code object's metadata: the target's wave size, no scratch and no VGPR spills,
static + dynamic LDS within a workgroup's limit, at least two waves per SIMD by the family's occupancy rules (one
where no tile of the kernel can reach two within the CU's LDS: see min_waves_per_simd); from the
disassembly (where the toolchain has llvm-objdump): no scratch/buffer spill traffic and, in matrix-unit variants, the
MFMA instruction of the dtype. The probes build as well: the prelude's cross-lane probe on every target (32 and 64
lanes) and the MFMA probe on CDNA2 and later (exactly two of its own instruction per kernel, spelled as AMD's
calculator spells it for the architecture, tests/kernels/mfma_layouts.json). Compiles run two at a time.

Needs ROCm's hiprtc; skipped without it unless PORTATTN_REQUIRE_AMD=1, which also requires at least two ROCm
generations (major releases) among the toolchains.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from pathlib import Path

import pytest

from portattn.errors import UnsupportedTargetError
from portattn.kernels import shipped_variants
from portattn.kernels.backward import BwdSpec
from portattn.kernels.decode import DecodeSpec
from portattn.kernels.probes import mfma_probe, prelude_probe
from portattn.kernels.variant import TileConfig
from portattn.runtime import amdgpu_metadata
from portattn.runtime.cache import DiskCache
from portattn.runtime.compiler import CompiledKernel, compile_kernel, compile_many
from portattn.runtime.hiprtc import toolchain_missing
from portattn.runtime.resources import amd_waves_per_simd
from portattn.runtime.sources import source_dir
from portattn.runtime.target import KNOWN_ARCHS, WAVE_SLOTS, Target
from portattn.runtime.toolchains import Toolchain, all_toolchains
from portattn.tools.fragments import INSTRUCTIONS
from portattn.tools.testing import compile_sample, full_matrix

REQUIRE = os.environ.get("PORTATTN_REQUIRE_AMD") == "1"
JOBS = 2  # compiles at a time (CI has two cores)
MIN_WAVES_PER_SIMD = 2
AMD_ARCHS = [arch for arch in KNOWN_ARCHS if arch.startswith("gfx")]
# The MFMA instruction of each dtype in the matrix-unit kernel (gfx90a spelling, or gfx940's with "_" and no "_1k").
MFMA_OF_DTYPE = {"float16": r"v_mfma_f32_16x16x16_?f16", "bfloat16": r"v_mfma_f32_16x16x16_?bf16(_1k)?",
                 "float32": r"v_mfma_f32_16x16x4_?f32"}
SPILL_OPS = ("scratch_", "buffer_store", "buffer_load")
PUBLISHED_LAYOUTS = Path(__file__).with_name("mfma_layouts.json")


def _missing() -> str | None:
    reason = toolchain_missing()
    if reason:
        return reason
    try:
        source_dir("hip")
    except FileNotFoundError:
        return "src_hip/ is missing (generate it with portattn-hipify)"
    return None


_REASON = _missing()
if _REASON and REQUIRE:
    raise RuntimeError(f"PORTATTN_REQUIRE_AMD=1 but {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

TOOLCHAINS: list[Toolchain] = [t for t in all_toolchains() if t.missing() is None] if _REASON is None else []
BASELINE = "gfx90a"  # the oldest target portattn is made for
MATRIX = [(tc, arch) for tc in TOOLCHAINS for arch in AMD_ARCHS if arch in tc.supported_archs()]


def _sample(tc: Toolchain, arch: str) -> list:
    """The variants compiled for (tc, arch) unless PORTATTN_FULL_MATRIX=1: on the baseline target one per kernel
    function and dtype with the first toolchain that knows it (the largest tiles), one per kernel function (other
    tiles) with the others; on the other targets one per kernel function (the largest tiles) with the first toolchain
    that knows them, and none (the probes only) with the others."""
    specs = shipped_variants(Target.for_arch(arch))
    if full_matrix():
        return specs
    place = [t for t, a in MATRIX if a == arch].index(tc)
    if arch == BASELINE:
        return compile_sample(specs, place, by_dtype=place == 0)
    return compile_sample(specs, 0, by_dtype=False) if place == 0 else []


SAMPLES = {(tc, arch): _sample(tc, arch) for tc, arch in MATRIX}
VARIANTS = [(tc, arch, spec) for tc, arch in MATRIX for spec in SAMPLES[tc, arch]]


def min_waves_per_simd(spec, target: Target) -> int:
    """Two, unless no tile of the kernel can reach two on ``target``:
    - the forward's matrix-unit kernel: every wave keeps its 16 query rows in LDS, so the cheapest way to eight
      resident waves per CU is one 8-wave workgroup of 16 keys per tile; when even that exceeds the CU's LDS (16-bit
      d = 256 and float32 d = 128 on 64 KiB), one wave per SIMD is the most;
    - the backward's matrix-unit kernels: a workgroup holds K, V, Q and dO tiles (and dS) of its head dim in LDS,
      28-61 KiB at the tiles that keep its waves busy, so one workgroup fits a CU: one wave per SIMD for 4-wave
      workgroups; the 2-wave ones (16-bit d = 256, float32 d = 96 / 128 for dK/dV) keep two of the four SIMDs busy
      (0 in the whole-CU count). No AMD GPU was available to measure whether smaller tiles are faster;
    - the backward's float32 simt kernels at d = 256: four float32 tiles of 8 rows take 33 KiB of LDS;
    - the decode kernel where its 64-row workgroup's Q, K and V tiles do not fit twice in LDS (16-bit d = 256,
      float32 d >= 96); float32 d = 256 runs one-wave workgroups of 16 rows whose tiles (49 KiB) fit once per CU
      (three times on gfx950's 160 KiB), so fewer waves than SIMDs are resident (0 in the whole-CU count): the decode
      of that row is bound by LDS capacity on AMD. In every case registers must not limit below what LDS allows."""
    if isinstance(spec, DecodeSpec):
        # one 4-wave workgroup of 64 packed rows and 16-key tiles: two per CU where their tiles fit twice in LDS
        if spec.stage != "attend":
            return MIN_WAVES_PER_SIMD
        slots = WAVE_SLOTS[target.family]
        groups_by_lds = target.smem_per_multiprocessor // spec.smem_bytes
        return min(MIN_WAVES_PER_SIMD, groups_by_lds * (spec.tile.threads // target.lanes) // slots.simds)
    if isinstance(spec, BwdSpec) and spec.stage != "prep":
        if spec.kernel == "mma":
            return 1 if spec.tile.threads >= 4 * target.lanes else 0
        if spec.head_dim == 256:
            return 1
    if spec.kernel != "mma" or isinstance(spec, BwdSpec):
        return MIN_WAVES_PER_SIMD
    waves = 2 * WAVE_SLOTS[target.family].simds
    cheapest = dataclasses.replace(spec, tile=TileConfig(block_m=16 * waves, block_n=16, threads=waves * target.lanes))
    return MIN_WAVES_PER_SIMD if cheapest.smem_bytes <= target.smem_per_multiprocessor else 1


def _id(tc: Toolchain, arch: str, label: str = "") -> str:
    return f"rocm{tc.rocm}-{tc.name}-{arch}" + (f"-{label}" if label else "")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return DiskCache(tmp_path_factory.mktemp("amd-kernels"))


@functools.lru_cache(maxsize=None)
def _built(tc: Toolchain, arch: str, cache_dir: str) -> dict[object, CompiledKernel | Exception]:
    """The variants of ``arch`` sampled for ``tc``, and the probes, compiled with ``tc`` (once per module, JOBS at a
    time)."""
    target = Target.for_arch(arch)
    specs = [*SAMPLES[tc, arch], prelude_probe(target)]
    if target.lanes == 64 and target.family != "cdna1":  # gfx908 has no bf16_1k MFMA, which the probe exercises
        specs.append(mfma_probe(target, next(iter(INSTRUCTIONS))))
    results = compile_many(specs, target, DiskCache(cache_dir), tc, jobs=JOBS)
    return dict(zip(specs, results))


def built(tc: Toolchain, arch: str, spec, cache: DiskCache) -> CompiledKernel:
    result = _built(tc, arch, str(cache.directory))[spec]
    if isinstance(result, Exception):
        raise result
    return result


def test_toolchains_span_two_rocm_generations():
    generations = sorted({t.rocm.split(".")[0] for t in TOOLCHAINS})
    listing = ", ".join(f"{t.label}: {t.version()}" for t in TOOLCHAINS)
    if len(generations) < 2:
        if REQUIRE:
            pytest.fail(f"PORTATTN_REQUIRE_AMD=1 but the toolchains here span ROCm {generations} only ({listing}); "
                        "scripts/install-rocm-chroots.sh installs current ones (as root)")
        pytest.skip(f"one ROCm generation here ({listing})")
    assert all(arch in TOOLCHAINS[0].supported_archs() for arch in ("gfx908", "gfx90a")), listing
    # Every AMD target of the tables is compiled by some toolchain.
    assert {arch for _, arch in MATRIX} == set(AMD_ARCHS), f"not compiled: {set(AMD_ARCHS) - {a for _, a in MATRIX}}"


@pytest.mark.parametrize("tc,arch,spec", VARIANTS, ids=[_id(tc, a, f"{s.dtype}-{s.label}") for tc, a, s in VARIANTS])
def test_variant_fits(tc, arch, spec, cache):
    target = Target.for_arch(arch)
    kernel = built(tc, arch, spec, cache)
    res = kernel.resources
    info = (f"{tc.label} {arch} {spec.label}: vgpr={res.registers} agpr={res.agprs} sgpr={res.sgprs} "
            f"static_lds={res.static_smem} dynamic_lds={spec.smem_bytes} scratch={res.scratch_bytes}")
    meta = amdgpu_metadata.kernel_metadata(kernel.binary, spec.function)
    assert amdgpu_metadata.target_arch(kernel.binary) == arch, info
    assert meta[".vgpr_count"] == res.registers > 0, info
    assert res.wavefront_size == target.lanes, info
    assert res.scratch_bytes == 0, info
    # VGPR spills would go to scratch memory: none. SGPR spills land in VGPR lanes when there is no scratch (the
    # 16-bit kernel's unrolled tile loops keep many uniform values); they cost v_writelane/v_readlane, no memory.
    assert meta.get(".vgpr_spill_count", 0) == 0, info
    assert res.static_smem + spec.smem_bytes <= target.smem_per_block, info
    waves = amd_waves_per_simd(res, spec.tile.threads, spec.smem_bytes, target)
    assert waves >= min_waves_per_simd(spec, target), f"{info} -> {waves} waves/SIMD"

    text = tc.disassemble(kernel.binary, arch)
    if text is None:
        return  # no llvm-objdump in this toolchain: the metadata checks above stand alone
    assert f"<{spec.function}>:" in text and "s_endpgm" in text, "disassembly does not show the kernel"
    spill_ops = [ln.strip() for ln in text.splitlines() if any(op in ln for op in SPILL_OPS)]
    assert not spill_ops, f"{info}: spill traffic:\n" + "\n".join(spill_ops[:10])
    if spec.kernel == "mma" and getattr(spec, "stage", "") not in ("prep", "append", "combine"):  # no products
        assert re.search(MFMA_OF_DTYPE[spec.dtype], text), f"{info}: no {MFMA_OF_DTYPE[spec.dtype]} in the machine code"
    else:
        assert "v_mfma" not in text, info


@pytest.mark.parametrize("tc,arch", MATRIX, ids=[_id(tc, a) for tc, a in MATRIX])
def test_prelude_probe_compiles(tc, arch, cache):
    """The prelude's HIP cross-lane operations (the probe that the GPU tests run) build for the target's lanes."""
    target = Target.for_arch(arch)
    kernel = built(tc, arch, prelude_probe(target), cache)
    assert kernel.resources.wavefront_size == target.lanes and kernel.resources.scratch_bytes == 0
    text = tc.disassemble(kernel.binary, arch)
    if text is not None:
        assert "ds_bpermute_b32" in text, "shuffles with run-time lane masks go through ds_bpermute"


def _mnemonics() -> dict[str, dict[str, str]]:
    """instruction -> calculator architecture -> mnemonic, as AMD's calculator spells them."""
    data = json.loads(PUBLISHED_LAYOUTS.read_text())["instructions"]
    return {name: {arch: e["mnemonic"] for arch, e in archs.items()} for name, archs in data.items()}


MFMA_MATRIX = [(tc, arch) for tc, arch in MATRIX
               if KNOWN_ARCHS[arch].lanes == 64 and KNOWN_ARCHS[arch].family != "cdna1"]


@pytest.mark.parametrize("tc,arch", MFMA_MATRIX, ids=[_id(tc, a) for tc, a in MFMA_MATRIX])
def test_mfma_probe_compiles(tc, arch, cache):
    """Every MFMA function of pa_mfma.cuh is one matrix instruction: each probe kernel (two chained instructions) is
    a wave64 kernel without scratch whose machine code holds exactly two of its own v_mfma mnemonic."""
    target = Target.for_arch(arch)
    kernel = built(tc, arch, mfma_probe(target, next(iter(INSTRUCTIONS))), cache)
    names = {f"pa_mfma_probe_{name}": name for name in INSTRUCTIONS}
    metas = {m[".name"]: m for m in amdgpu_metadata.kernels(kernel.binary)}
    assert set(names) <= set(metas), f"kernels in the code object: {sorted(metas)}"
    for name in names:
        meta = metas[name]
        assert meta[".wavefront_size"] == 64 and meta[".private_segment_fixed_size"] == 0, f"{name}: {meta}"
        assert meta.get(".vgpr_spill_count", 0) == 0, f"{name}: {meta}"

    text = tc.disassemble(kernel.binary, arch)
    if text is None:
        return
    bodies: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        label = line.strip()
        if label.endswith(">:") and "<" in label:
            current = label[label.index("<") + 1:-2]
            bodies[current] = []
        elif current is not None:
            bodies[current].append(line)
    spelling = "cdna2" if target.family == "cdna2" else "cdna3"  # gfx940 and later spell them as CDNA3 does
    mnemonics = _mnemonics()
    for kernel_name, name in names.items():
        assert kernel_name in bodies, f"disassembly does not show {kernel_name}"
        mfma = [ln.split()[0] for ln in bodies[kernel_name] if "v_mfma_" in ln]
        expected = mnemonics[name][spelling]
        assert mfma == [expected] * 2, f"{kernel_name}: expected two {expected}, found {mfma}"
        assert not any(op in ln for ln in bodies[kernel_name] for op in SPILL_OPS)


BF16_NATIVE = [(tc, arch) for tc, arch in MATRIX if arch == "gfx950"]


@pytest.mark.parametrize("tc,arch", BF16_NATIVE, ids=[_id(tc, a) for tc, a in BF16_NATIVE])
def test_bfloat16_uses_the_compilers_type_on_gfx950(tc, arch, cache):
    """Where the compiler has a bf16 type (every compiler that knows gfx950), the prelude converts through it:
    gfx950's packed float -> bf16 conversion instruction appears in the bfloat16 matrix-unit variants (all but the
    decode's append kernel, which copies bf16 values without converting them; one per kernel function unless
    PORTATTN_FULL_MATRIX=1)."""
    target = Target.for_arch(arch)
    specs = compile_sample([s for s in shipped_variants(target) if s.kernel == "mma" and s.dtype == "bfloat16"
                            and not (isinstance(s, DecodeSpec) and s.stage == "append")])
    assert specs
    # JOBS at a time; those of the module's batch come from the cache
    for spec, kernel in zip(specs, compile_many(specs, target, cache, tc, jobs=JOBS)):
        if isinstance(kernel, Exception):
            raise kernel
        text = tc.disassemble(kernel.binary, arch)
        if text is None:
            pytest.skip(f"{tc.label} has no llvm-objdump")
        assert "v_cvt_pk_bf16_f32" in text, f"{spec.label}: no v_cvt_pk_bf16_f32"


@pytest.mark.parametrize("tc", TOOLCHAINS, ids=[_id(tc, "") for tc in TOOLCHAINS])
def test_unknown_processors_are_refused_naming_the_rocm_that_knows_them(tc, cache):
    unknown = [arch for arch in AMD_ARCHS if arch not in tc.supported_archs()]
    if not unknown:
        assert all(arch in tc.supported_archs() for arch in AMD_ARCHS)
        return
    arch = unknown[0]
    target = Target.for_arch(arch)
    with pytest.raises(UnsupportedTargetError) as info:
        compile_kernel(shipped_variants(target)[0], target, cache, tc)
    msg = str(info.value)
    assert f"{arch} needs ROCm >= {KNOWN_ARCHS[arch].min_rocm}" in msg and f"installed: ROCm {tc.rocm}" in msg, msg
