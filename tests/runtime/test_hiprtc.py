"""hiprtc compile path for AMD, CPU only: code objects, metadata, diagnostics, refused and crashing targets, with
this machine's ROCm and every chroot toolchain present (scripts/install-rocm-chroots.sh; root only).

Needs ROCm's hiprtc (scripts/install-rocm-toolchain.sh); skipped without it unless PORTATTN_REQUIRE_AMD=1, which
turns the skip into a failure.
"""
from __future__ import annotations

import os
import re
import signal

import pytest

from portattn.errors import CompileError, UnsupportedTargetError
from portattn.runtime import amdgpu_metadata
from portattn.runtime.hiprtc import toolchain_missing
from portattn.runtime.sources import KernelSource

_REASON = toolchain_missing()
if _REASON and os.environ.get("PORTATTN_REQUIRE_AMD") == "1":
    raise RuntimeError(f"PORTATTN_REQUIRE_AMD=1 but {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

if _REASON is None:
    from portattn.runtime import hiprtc
    from portattn.runtime.toolchains import all_toolchains

TOOLCHAINS = [t for t in all_toolchains() if t.missing() is None] if _REASON is None else []
IDS = [f"rocm{t.rocm}-{t.name}" for t in TOOLCHAINS]

HEADER = ("pa_test_scale.cuh", "#pragma once\n#define PA_TEST_SCALE(x) ((x) * 3.0f)\n")

KERNEL = """
#include "pa_test_scale.cuh"
struct Args { const float* x; float* y; int n; };
extern "C" __global__ void __launch_bounds__(256) pa_test_kernel(const Args a) {
    __shared__ float tile[256];
    const int i = blockIdx.x * 256 + threadIdx.x;
    tile[threadIdx.x] = i < a.n ? a.x[i] : 0.f;
    __syncthreads();
    float v = PA_TEST_SCALE(tile[255 - threadIdx.x]);
    for (int m = 32; m > 0; m /= 2) v += __shfl_xor(v, m, 64);
    if (i < a.n) a.y[i] = expf(v);
}
"""


def _compile(text: str, arch: str = "gfx90a", headers=(HEADER,), toolchain=None):
    src = KernelSource("pa_test.cu", text, tuple(headers))
    return hiprtc.compile_source(src, arch, hiprtc.options(arch, {"PA_WARP_SIZE": 64}), toolchain)


def test_options_and_version():
    opts = hiprtc.options("gfx90a", {"PA_B": 2, "PA_A": 1})
    assert opts[0] == "--offload-arch=gfx90a"
    assert "-std=c++17" in opts and "-O3" in opts
    assert [o for o in opts if o.startswith("-D")] == ["-DPA_A=1", "-DPA_B=2"]
    assert re.search(r"^rocm \d+\.\d+\.\d+ hiprtc lib\w+\.so\.[\d.]+ comgr \d", hiprtc.version()), hiprtc.version()
    assert "gfx90a" in hiprtc.supported_archs()


@pytest.mark.parametrize("toolchain", TOOLCHAINS, ids=IDS)
def test_toolchain_versions_differ_and_name_the_release(toolchain):
    assert toolchain.version().startswith(f"rocm {toolchain.rocm_release} ")
    assert re.fullmatch(r"\d+\.\d+", toolchain.rocm)
    assert len({t.version() for t in TOOLCHAINS}) == len(TOOLCHAINS)  # each its own cache keys


@pytest.mark.parametrize("toolchain", TOOLCHAINS, ids=IDS)
def test_small_kernel_metadata(toolchain):
    binary, _log = _compile(KERNEL, toolchain=toolchain)
    assert binary[:4] == b"\x7fELF"
    meta = amdgpu_metadata.kernel_metadata(binary, "pa_test_kernel")
    assert meta[".symbol"] == "pa_test_kernel.kd"
    assert meta[".wavefront_size"] == 64
    assert meta[".vgpr_count"] > 0
    assert meta[".group_segment_fixed_size"] == 256 * 4  # the static tile
    assert meta[".kernarg_segment_size"] >= 20  # the by-value struct: two pointers and an int
    assert amdgpu_metadata.target_arch(binary) == "gfx90a"
    res = hiprtc.resources(binary, _log, "pa_test_kernel")
    assert (res.wavefront_size, res.registers, res.static_smem) == (64, meta[".vgpr_count"], 1024)
    assert res.sgprs == meta[".sgpr_count"] > 0
    assert res.spill_bytes == 0 and res.scratch_bytes == 0


def test_disassembly_when_available():
    if amdgpu_metadata.objdump_tool() is None:
        pytest.skip("no llvm-objdump (apt-get install llvm-15)")
    binary, _ = _compile(KERNEL)
    text = amdgpu_metadata.disassemble(binary)
    assert "<pa_test_kernel>:" in text
    assert "ds_bpermute_b32" in text or "ds_swizzle_b32" in text or "dpp" in text  # the cross-lane sum
    assert "s_endpgm" in text


@pytest.mark.parametrize("toolchain", TOOLCHAINS, ids=IDS)
def test_compile_error_carries_clang_diagnostic(toolchain):
    broken = KERNEL.replace("tile[threadIdx.x] =", "tile[threadIdx.x] = pa_no_such_symbol +")
    with pytest.raises(CompileError) as info:
        _compile(broken, toolchain=toolchain)
    err = info.value
    assert not isinstance(err, hiprtc.CompilerCrashError)
    assert err.backend == "hiprtc" and err.arch == "gfx90a" and err.name == "pa_test.cu"
    assert "pa_no_such_symbol" in err.log and "error" in err.log
    assert re.search(r"pa_test\.cu:\d+:\d+", err.log), err.log
    assert "comgr-" not in err.log, err.log  # the compiler's temporary directories are not shown


@pytest.mark.parametrize("toolchain", TOOLCHAINS, ids=IDS)
def test_missing_header_is_a_compile_error(toolchain):
    with pytest.raises(CompileError, match="pa_test_scale.cuh"):
        _compile(KERNEL, headers=(), toolchain=toolchain)


def test_unknown_arch_is_refused_up_front():
    supported = hiprtc.supported_archs()
    arch = next(a for a in ("gfx942", "gfx1100", "gfx1200", "gfx9999") if a not in supported)
    with pytest.raises(UnsupportedTargetError) as info:
        _compile(KERNEL, arch=arch)
    msg = str(info.value)
    assert arch in msg and "gfx90a" in msg
    if arch == "gfx942":
        assert "gfx942 needs ROCm >= 5.7 (installed: ROCm 5." in msg, msg


def test_compiler_crash_does_not_kill_the_caller():
    # gfx908 has no bf16_1k MFMA; ROCm 5.2's backend aborts the process on it instead of reporting an error.
    text = """
typedef short shortx4 __attribute__((ext_vector_type(4)));
typedef float floatx4 __attribute__((ext_vector_type(4)));
extern "C" __global__ void pa_test_mfma(floatx4* o, const shortx4* a) {
    o[threadIdx.x] = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a[0], a[1], o[threadIdx.x], 0, 0, 0);
}
"""
    if "gfx908" not in hiprtc.supported_archs():
        pytest.skip("this hiprtc does not target gfx908")
    with pytest.raises(CompileError) as info:
        _compile(text, arch="gfx908", headers=())
    err = info.value
    assert "gfx908" in str(err)
    if isinstance(err, hiprtc.CompilerCrashError):
        assert err.signum == signal.SIGABRT
        assert "mfma" in err.log.lower()
    # this process is still alive and the compiler still works
    binary, _ = _compile(text, arch="gfx90a", headers=())
    assert "v_mfma_f32_16x16x16bf16_1k" in (amdgpu_metadata.disassemble(binary) or "v_mfma_f32_16x16x16bf16_1k")
