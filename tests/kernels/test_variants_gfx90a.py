"""Every kernel variant shipped for gfx90a compiles from src_hip/ with hiprtc and fits the hardware.

Per variant: 64-lane waves, no scratch and no spills, static + dynamic LDS within the 64 KiB of a CU, at least two
waves per SIMD, and (with llvm-objdump) no scratch/buffer spill traffic in the machine code. Needs ROCm's hiprtc
and hip-python; skipped without them unless PORTATTN_REQUIRE_AMD=1.
"""
from __future__ import annotations

import os

import pytest

from portattn.kernels import shipped_variants
from portattn.kernels.backward import BwdSpec
from portattn.kernels.probes import mfma_probe, prelude_probe
from portattn.runtime import amdgpu_metadata
from portattn.runtime.cache import DiskCache
from portattn.runtime.compiler import compile_kernel
from portattn.runtime.hiprtc import toolchain_missing
from portattn.runtime.resources import amd_waves_per_simd
from portattn.runtime.sources import source_dir
from portattn.runtime.target import Target

ARCH = "gfx90a"
LDS_PER_CU = 65536


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
if _REASON and os.environ.get("PORTATTN_REQUIRE_AMD") == "1":
    raise RuntimeError(f"PORTATTN_REQUIRE_AMD=1 but {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

TARGET = Target.for_arch(ARCH)
SPECS = shipped_variants(TARGET)


def min_waves_per_simd(spec) -> int:
    """Two waves per SIMD, except:
    - the forward's matrix-unit tiles of 4-wave workgroups (16-bit d = 256, float32 d = 96 / 128): each needs about
      50 KiB of LDS, so one workgroup (one wave per SIMD) fits a CU;
    - the backward's matrix-unit kernels: K, V, Q and dO tiles (and dS) of one workgroup take 28-61 KiB of LDS, so
      one workgroup fits a CU; those of 2-wave workgroups (16-bit d = 256, float32 d = 96 / 128 for dK/dV) keep only
      two SIMDs busy (0 by the whole-CU count below). No AMD GPU was available to measure whether smaller tiles
      with more workgroups are faster;
    - the backward's float32 simt kernels at d = 256: four float32 tiles of 8 rows take 33 KiB of LDS."""
    if isinstance(spec, BwdSpec) and spec.kernel == "mma" and spec.stage != "prep":
        return 1 if spec.tile.threads >= 256 else 0
    if isinstance(spec, BwdSpec) and spec.kernel == "simt" and spec.head_dim == 256:
        return 1
    return 1 if spec.kernel == "mma" and spec.tile.threads == 256 else 2


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return DiskCache(tmp_path_factory.mktemp("amd-kernels"))


@pytest.mark.parametrize("spec", SPECS, ids=[s.label for s in SPECS])
def test_variant_fits_gfx90a(spec, cache):
    kernel = compile_kernel(spec, TARGET, cache)
    res = kernel.resources
    info = (f"{spec.label}: vgpr={res.registers} agpr={res.agprs} sgpr={res.sgprs} static_lds={res.static_smem} "
            f"dynamic_lds={spec.smem_bytes} scratch={res.scratch_bytes} spills={res.spill_bytes}")
    meta = amdgpu_metadata.kernel_metadata(kernel.binary, spec.function)
    assert meta[".vgpr_count"] == res.registers > 0, info
    assert res.wavefront_size == 64, info
    assert res.scratch_bytes == 0, info
    # VGPR spills would go to scratch memory: none. SGPR spills land in VGPR lanes when there is no scratch (the
    # 16-bit kernel's unrolled tile loops keep many uniform values); they cost v_writelane/v_readlane, no memory.
    assert meta[".vgpr_spill_count"] == 0, info
    assert res.static_smem + spec.smem_bytes <= LDS_PER_CU, info
    waves = amd_waves_per_simd(res, spec.tile.threads, spec.smem_bytes)
    assert waves >= min_waves_per_simd(spec), f"{info} -> {waves} waves/SIMD"

    text = amdgpu_metadata.disassemble(kernel.binary, ARCH)
    if text is None:
        return  # no llvm-objdump: the metadata checks above stand alone
    assert f"<{spec.function}>:" in text and "s_endpgm" in text, "disassembly does not show the kernel"
    spill_ops = [ln.strip() for ln in text.splitlines()
                 if any(op in ln for op in ("scratch_", "buffer_store", "buffer_load"))]
    assert not spill_ops, f"{info}: spill traffic:\n" + "\n".join(spill_ops[:10])
    if spec.kernel == "mma" and getattr(spec, "stage", "") != "prep":  # the backward's first kernel: no products
        mnemonic = {"float16": "v_mfma_f32_16x16x16f16", "bfloat16": "v_mfma_f32_16x16x16bf16_1k",
                    "float32": "v_mfma_f32_16x16x4f32"}[spec.dtype]
        assert mnemonic in text, f"{info}: no {mnemonic} in the machine code"


def test_prelude_probe_compiles_for_gfx90a(cache):
    """The prelude's HIP cross-lane operations (the probe that the GPU tests run on NVIDIA) build for wave64."""
    kernel = compile_kernel(prelude_probe(TARGET), TARGET, cache)
    assert kernel.resources.wavefront_size == 64 and kernel.resources.scratch_bytes == 0
    text = amdgpu_metadata.disassemble(kernel.binary, ARCH)
    if text is not None:
        assert "ds_bpermute_b32" in text, "shuffles with run-time lane masks go through ds_bpermute"


def test_mfma_probe_compiles_for_gfx90a(cache):
    """Every MFMA function of pa_mfma.cuh is one matrix instruction on gfx90a: each probe kernel (two chained
    instructions) is a wave64 kernel without scratch whose machine code holds exactly its own v_mfma mnemonic."""
    from portattn.tools.fragments import INSTRUCTIONS

    names = {f"pa_mfma_probe_{lay.name}": lay for lay in INSTRUCTIONS.values()}
    kernel = compile_kernel(mfma_probe(TARGET, next(iter(INSTRUCTIONS))), TARGET, cache)
    metas = {m[".name"]: m for m in amdgpu_metadata.kernels(kernel.binary)}
    assert set(names) <= set(metas), f"kernels in the code object: {sorted(metas)}"
    for name in names:
        meta = metas[name]
        info = f"{name}: {meta}"
        assert meta[".wavefront_size"] == 64, info
        assert meta[".private_segment_fixed_size"] == 0, info
        assert meta.get(".vgpr_spill_count", 0) == 0 and meta.get(".sgpr_spill_count", 0) == 0, info

    text = amdgpu_metadata.disassemble(kernel.binary, ARCH)
    if text is None:
        return  # no llvm-objdump: the metadata checks above stand alone
    bodies: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        label = line.strip()
        if label.endswith(">:") and "<" in label:
            current = label[label.index("<") + 1:-2]
            bodies[current] = []
        elif current is not None:
            bodies[current].append(line)
    for name, lay in names.items():
        assert name in bodies, f"disassembly does not show {name}"
        mfma = [ln.split()[0] for ln in bodies[name] if "v_mfma_" in ln]
        assert mfma == [lay.mnemonic] * 2, f"{name}: expected two {lay.mnemonic}, found {mfma}"
        assert not any(op in ln for ln in bodies[name] for op in ("scratch_", "buffer_store", "buffer_load"))
