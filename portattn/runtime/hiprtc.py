"""AMD backend of the kernel compiler: hiprtc through hip-python, to a code object for the exact arch.

Every compile runs in a child process (``hiprtc_worker.py``): ROCm's code object manager aborts the whole process
for a processor it does not know (gfx942 on ROCm 5.2) or an instruction the processor lacks (bf16_1k MFMA on
gfx908). Processors the installed compiler does not list are refused before compiling; a compiler that dies
anyway surfaces as :class:`CompilerCrashError`.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from ..errors import CompileError, PortattnError, UnsupportedTargetError
from .amdgpu_metadata import kernels
from .resources import Resources
from .rocm_libs import RocmLibs, discover
from .sources import KernelSource

NAME = "hiprtc"
WORKER = Path(__file__).with_name("hiprtc_worker.py")
TIMEOUT_ENV = "PORTATTN_HIPRTC_TIMEOUT"
_INSTALL_HINT = "install ROCm's hiprtc (scripts/install-rocm-toolchain.sh does it on Debian) and hip-python"


class CompilerCrashError(CompileError):
    """The hiprtc compiler process died (a signal) instead of returning a result."""

    def __init__(self, arch: str, options: list[str], log: str, source: str, name: str, signum: int) -> None:
        self.signum = signum
        try:
            sig = signal.Signals(signum).name
        except ValueError:
            sig = f"signal {signum}"
        detail = (f"the compiler process died with {sig}: the installed ROCm compiler ({version()}) cannot build "
                  f"this kernel for {arch}\n{log}")
        super().__init__(NAME, arch, options, detail, source, name)


def _libs() -> RocmLibs:
    libs = discover()
    if libs is None:
        raise PortattnError(f"the AMD backend found no ROCm hiprtc library: {_INSTALL_HINT}")
    return libs


@functools.lru_cache(maxsize=None)
def toolchain_missing() -> str | None:
    """Why hiprtc cannot be used here (a sentence), or None when hip-python and a hiprtc library are present."""
    import importlib.util

    if importlib.util.find_spec("hip") is None:
        return "hip-python is not installed (scripts/install-rocm-toolchain.sh installs it)"
    if discover() is None:
        return "no ROCm hiprtc library (scripts/install-rocm-toolchain.sh installs ROCm 5.2 from Debian)"
    return None


def version() -> str:
    """ROCm hiprtc and comgr versions (read from the libraries' files, nothing is loaded)."""
    return _libs().version()


def build_arch(arch: str, defines: dict[str, int]) -> str:
    """The arch to build for: always the target's own."""
    return arch


def options(arch: str, defines: dict[str, int]) -> list[str]:
    return [f"--offload-arch={arch}", "-std=c++17", "-O3"] + [f"-D{k}={v}" for k, v in sorted(defines.items())]


def run_worker(request: dict, timeout: float | None = None) -> tuple[dict | None, int, str]:
    """Send ``request`` to a fresh worker process: (reply or None, exit status, stderr)."""
    libs = _libs()
    request = {**request, "comgr": str(libs.comgr) if libs.comgr else None}
    env = {**os.environ, **libs.env()}
    timeout = timeout or float(os.environ.get(TIMEOUT_ENV, "900"))
    try:
        proc = subprocess.run([sys.executable, str(WORKER)], input=json.dumps(request).encode(),
                              capture_output=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PortattnError(f"hiprtc did not finish within {timeout:.0f} s (set {TIMEOUT_ENV} to wait longer)")
    stderr = proc.stderr.decode(errors="replace")
    try:
        reply = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        reply = None
    return reply, proc.returncode, stderr


@functools.lru_cache(maxsize=None)
def supported_archs() -> tuple[str, ...]:
    """Processors the installed compiler can target (asks the code object manager in a worker process)."""
    reply, code, stderr = run_worker({"op": "info"})
    if reply is None or reply.get("status") != "ok":
        raise PortattnError(f"cannot query hiprtc (exit {code}): {(reply or {}).get('message', stderr[-2000:])}")
    return tuple(reply["isa"] or ())


_COMGR_PATH = re.compile(r"(?:[\w./-]*/)?comgr-\w+/(?:input|include)/")


def tidy_log(log: str, name: str) -> str:
    """Name files as the kernel source tree does: ROCm 5.2 reports the main file as ``/tmp/comgr-*/input/CompileSource``
    and headers under ``/tmp/comgr-*/include/``."""
    return _COMGR_PATH.sub("", log).replace("CompileSource:", f"{name}:")


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def compile_source(source: KernelSource, arch: str, opts: list[str]) -> tuple[bytes, str]:
    """Compile to an AMDGPU code object; returns (code object, log).

    Raises CompileError with the clang diagnostics, UnsupportedTargetError for a processor the compiler does not
    know, CompilerCrashError when the compiler process dies, PortattnError for anything else.
    """
    request = {"op": "compile", "name": source.name, "text": source.text, "headers": [list(h) for h in source.headers],
               "options": list(opts), "arch": arch}
    reply, code, stderr = run_worker(request)
    if code < 0:
        raise CompilerCrashError(arch, opts, _tail(stderr.strip()), source.text, source.name, -code)
    if reply is None:
        raise PortattnError(f"the hiprtc worker exited with status {code} and no reply:\n{_tail(stderr)}")
    status = reply.get("status")
    log = tidy_log(reply.get("log", ""), source.name)
    if status == "ok":
        return base64.b64decode(reply["code"]), log
    if status == "compile_error":
        raise CompileError(NAME, arch, opts, log or reply.get("result", ""), source.text, source.name)
    if status == "unsupported_arch":
        raise UnsupportedTargetError(
            f"the installed hiprtc ({version()}) cannot compile for {arch}; it supports: {', '.join(reply['isa'])}"
        )
    raise PortattnError(f"hiprtc failed: {reply.get('message', reply)}. {_INSTALL_HINT}")


def resources(binary: bytes, log: str, function: str) -> Resources:
    """Resources from the code object's metadata note (the largest value over its kernels, usually one)."""
    found = kernels(binary)
    if not found:
        raise ValueError("the code object's metadata lists no kernel")

    def most(key: str) -> int:
        return max(int(k.get(key, 0)) for k in found)

    return Resources(
        registers=most(".vgpr_count"),
        static_smem=most(".group_segment_fixed_size"),
        spill_bytes=max(int(k.get(".vgpr_spill_count", 0)) + int(k.get(".sgpr_spill_count", 0)) for k in found),
        scratch_bytes=most(".private_segment_fixed_size"),
        wavefront_size=most(".wavefront_size"),
        agprs=most(".agpr_count"),
        sgprs=most(".sgpr_count"),
    )
