"""AMD backend of the kernel compiler: hiprtc, to a code object for the exact arch.

Every compile runs in a child process (``hiprtc_worker.py``, through a :class:`~.toolchains.Toolchain`): ROCm's
code object manager aborts the whole process for a processor it does not know (gfx942 on ROCm 5.2) or an
instruction the processor lacks (bf16_1k MFMA on gfx908). Processors the toolchain's compiler does not list are
refused before compiling; a compiler that dies anyway surfaces as :class:`CompilerCrashError`.

Every function takes an optional ``toolchain``; the default is this machine's ROCm (the run-time path).
"""
from __future__ import annotations

import base64
import functools
import re
import signal

from ..errors import CompileError, PortattnError, UnsupportedTargetError
from .amdgpu_metadata import kernels
from .resources import Resources
from .sources import KernelSource
from .target import KNOWN_ARCHS
from .toolchains import Toolchain, all_toolchains, find_toolchain, system_toolchain

NAME = "hiprtc"
_INSTALL_HINT = "install ROCm's hiprtc (scripts/install-rocm-toolchain.sh does it on Debian)"


class CompilerCrashError(CompileError):
    """The hiprtc compiler process died (a signal) instead of returning a result."""

    def __init__(self, arch: str, options: list[str], log: str, source: str, name: str, signum: int,
                 toolchain: Toolchain) -> None:
        self.signum = signum
        try:
            sig = signal.Signals(signum).name
        except ValueError:
            sig = f"signal {signum}"
        detail = (f"the compiler process died with {sig}: the {toolchain.label} compiler ({toolchain.version()}) "
                  f"cannot build this kernel for {arch}\n{log}")
        super().__init__(NAME, arch, options, detail, source, name)


def _toolchain(toolchain: Toolchain | None) -> Toolchain:
    return toolchain if toolchain is not None else find_toolchain(None)


@functools.lru_cache(maxsize=None)
def _system_missing() -> str | None:
    if system_toolchain() is None:
        return "no ROCm hiprtc library (scripts/install-rocm-toolchain.sh installs ROCm 5.2 from Debian)"
    return None


def toolchain_missing(toolchain: Toolchain | None = None) -> str | None:
    """Why hiprtc cannot be used here (a sentence), or None when the toolchain (default: the system's) works."""
    return _system_missing() if toolchain is None else toolchain.missing()


def version(toolchain: Toolchain | None = None) -> str:
    """ROCm release, hiprtc and comgr versions (read from the libraries' files, nothing is loaded)."""
    return _toolchain(toolchain).version()


def build_arch(arch: str, defines: dict[str, int]) -> str:
    """The arch to build for: always the target's own."""
    return arch


def options(arch: str, defines: dict[str, int]) -> list[str]:
    return [f"--offload-arch={arch}", "-std=c++17", "-O3"] + [f"-D{k}={v}" for k, v in sorted(defines.items())]


def supported_archs(toolchain: Toolchain | None = None) -> tuple[str, ...]:
    """Processors the toolchain's compiler can target (asks its code object manager in a worker process)."""
    return _toolchain(toolchain).supported_archs()


def unsupported_message(arch: str, toolchain: Toolchain, isa: list[str] | tuple[str, ...]) -> str:
    """Why ``toolchain`` cannot build for ``arch``: the ROCm release that supports it, what this compiler knows and
    which toolchains here would do."""
    info = KNOWN_ARCHS.get(arch)
    need = f"{arch} needs ROCm >= {info.min_rocm}" if info and info.min_rocm else f"{arch} is not a processor"
    others = [t for t in all_toolchains() if t != toolchain and t.missing() is None and arch in t.supported_archs()]
    hint = ("; toolchains here that know it: " + ", ".join(f"{t.label} (--rocm {t.rocm})" for t in others)
            if others else "")
    where = "" if toolchain.root is None else f" in the {toolchain.name} chroot"
    return (f"{need} (installed: ROCm {toolchain.rocm_release}{where}){hint}; that compiler supports: "
            f"{', '.join(isa)}")


_COMGR_PATH = re.compile(r"(?:[\w./-]*/)?comgr-[\w-]+/(?:input|include)/")


def tidy_log(log: str, name: str) -> str:
    """Name files as the kernel source tree does: ROCm 5.2 reports the main file as ``/tmp/comgr-*/input/CompileSource``
    and headers under ``/tmp/comgr-*/include/``."""
    return _COMGR_PATH.sub("", log).replace("CompileSource:", f"{name}:")


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def compile_source(source: KernelSource, arch: str, opts: list[str],
                   toolchain: Toolchain | None = None) -> tuple[bytes, str]:
    """Compile to an AMDGPU code object with ``toolchain`` (default: the system's); returns (code object, log).

    Raises CompileError with the clang diagnostics, UnsupportedTargetError for a processor the compiler does not
    know, CompilerCrashError when the compiler process dies, PortattnError for anything else.
    """
    tc = _toolchain(toolchain)
    request = {"op": "compile", "name": source.name, "text": source.text, "headers": [list(h) for h in source.headers],
               "options": list(opts), "arch": arch}
    reply, code, stderr = tc.run(request)
    if code < 0:
        raise CompilerCrashError(arch, opts, _tail(stderr.strip()), source.text, source.name, -code, tc)
    if reply is None:
        raise PortattnError(f"the hiprtc worker ({tc.label}) exited with status {code} and no reply:\n"
                            f"{_tail(stderr)}")
    status = reply.get("status")
    log = tidy_log(reply.get("log", ""), source.name)
    if status == "ok":
        return base64.b64decode(reply["code"]), log
    if status == "compile_error":
        raise CompileError(NAME, arch, opts, log or reply.get("result", ""), source.text, source.name)
    if status == "unsupported_arch":
        raise UnsupportedTargetError(unsupported_message(arch, tc, reply["isa"]))
    raise PortattnError(f"hiprtc ({tc.label}) failed: {reply.get('message', reply)}. {_INSTALL_HINT}")


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
