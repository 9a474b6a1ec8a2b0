"""NVIDIA backend of the kernel compiler: NVRTC through cuda-python, always to a cubin for the exact arch."""
from __future__ import annotations

from ..errors import CompileError, PortattnError
from .resources import Resources, parse_cubin, parse_ptxas_log
from .sources import KernelSource

NAME = "nvrtc"


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise PortattnError("the NVIDIA backend needs cuda-python (pip install cuda-python)") from exc
    return nvrtc


def _check(nvrtc, result, call: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise PortattnError(f"{call} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def version() -> str:
    nvrtc = _nvrtc()
    major, minor = _check(nvrtc, nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


def build_arch(arch: str, defines: dict[str, int]) -> str:
    """The arch to build for: the arch-specific variant ("sm_90a") for the warpgroup MMA, which needs it."""
    return arch + "a" if defines.get("PA_MMA_WGMMA") else arch


def options(arch: str, defines: dict[str, int]) -> list[str]:
    return [f"--gpu-architecture={arch}", "-std=c++17", "-Xptxas=-v", "--use_fast_math"] + [
        f"-D{k}={v}" for k, v in sorted(defines.items())
    ]


def compile_source(source: KernelSource, arch: str, opts: list[str]) -> tuple[bytes, str]:
    """Compile to a cubin; returns (cubin, log). Raises CompileError with the log on failure."""
    nvrtc = _nvrtc()
    names = [n.encode() for n, _ in source.headers]
    texts = [t.encode() for _, t in source.headers]
    prog = _check(
        nvrtc,
        nvrtc.nvrtcCreateProgram(source.text.encode(), source.name.encode(), len(names), texts, names),
        "nvrtcCreateProgram",
    )
    try:
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\0").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(NAME, arch, opts, log, source.text, source.name)
        size = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin, log
    finally:
        _check(nvrtc, nvrtc.nvrtcDestroyProgram(prog), "nvrtcDestroyProgram")


def resources(binary: bytes, log: str, function: str) -> Resources:
    """From the ptxas report in the log; from the cubin itself when NVRTC returned no report (seen with
    NVRTC 13.0 when a process compiles the same program twice)."""
    try:
        return parse_ptxas_log(log)
    except ValueError:
        return parse_cubin(binary, function)
