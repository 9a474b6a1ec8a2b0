"""Kernel compilation with caching: one entry point for both vendors' run-time compilers.

What to build is described by any object with the attributes of :class:`Buildable` (the kernel families' variant
specs); the result is kept in memory and in the disk cache (``cache.py``) under a key that covers everything that
determines the binary.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from ..version import __version__
from .backend import backend_for
from .cache import DiskCache
from .resources import Resources
from .sources import read_source
from .target import Target

if TYPE_CHECKING:
    from .toolchains import Toolchain


class Buildable(Protocol):
    """A kernel variant as the compiler sees it."""

    @property
    def filename(self) -> str: ...  # source file in the vendor's tree

    @property
    def function(self) -> str: ...  # entry point

    @property
    def defines(self) -> Mapping[str, int]: ...

    @property
    def label(self) -> str: ...  # for logs and reports


@dataclass(frozen=True)
class CompiledKernel:
    spec: Any  # the Buildable it was made from
    arch: str
    backend: str
    key: str
    binary: bytes
    log: str
    resources: Resources
    from_disk: bool
    compiler_version: str = ""  # the compiler's version() (hiprtc: its toolchain and ROCm release)


_memory: dict[str, CompiledKernel] = {}
_lock = threading.Lock()
_log = logging.getLogger("portattn")


def cache_key(source_digest: str, options: list[str], arch: str, backend: str, compiler_version: str) -> str:
    """Hash of everything that determines the binary."""
    blob = json.dumps([source_digest, options, arch, backend, compiler_version, __version__])
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


def compile_kernel(spec: Buildable, target: Target, cache: DiskCache | None = None,
                   toolchain: Toolchain | None = None) -> CompiledKernel:
    """Compile ``spec`` for ``target``, from memory or disk cache when possible. ``toolchain`` (AMD only) picks a
    ROCm hiprtc toolchain other than the system's (verification and reports)."""
    compiler = backend_for(target.vendor).compiler
    if toolchain is not None and target.vendor != "hip":
        raise ValueError(f"toolchain applies to AMD targets only, got {toolchain.name!r} for {target.arch}")
    extra = {} if toolchain is None else {"toolchain": toolchain}
    source = read_source(target.vendor, spec.filename)
    defines = dict(spec.defines)
    arch = compiler.build_arch(target.arch, defines)
    opts = compiler.options(arch, defines)
    version = compiler.version(**extra)
    key = cache_key(source.digest, opts, arch, compiler.NAME, version)
    with _lock:
        hit = _memory.get(key)
    if hit is not None:
        return hit
    cache = cache if cache is not None else DiskCache()
    entry = cache.get(key)
    if entry is not None:
        meta, binary = entry
        kernel = CompiledKernel(spec, arch, compiler.NAME, key, binary, meta["log"],
                                Resources(**meta["resources"]), True, version)
    else:
        _log.info("compiling %s for %s (first use; cached in %s)", spec.label, arch, cache.directory)
        start = time.perf_counter()
        binary, log = compiler.compile_source(source, arch, opts, **extra)
        _log.info("compiled %s in %.1f s", spec.label, time.perf_counter() - start)
        res = compiler.resources(binary, log, spec.function)
        cache.put(key, {"log": log, "resources": res.to_dict(), "label": spec.label, "arch": arch}, binary)
        kernel = CompiledKernel(spec, arch, compiler.NAME, key, binary, log, res, False, version)
    with _lock:
        _memory[key] = kernel
    return kernel


def compile_many(specs: Sequence[Buildable], target: Target, cache: DiskCache | None = None,
                 toolchain: Toolchain | None = None, jobs: int = 2) -> list[CompiledKernel | Exception]:
    """Compile every spec as :func:`compile_kernel` does, ``jobs`` at a time (hiprtc compiles are processes of
    their own, so threads suffice); each result is the kernel or the exception its compile raised."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")

    def one(spec: Buildable) -> CompiledKernel | Exception:
        try:
            return compile_kernel(spec, target, cache, toolchain)
        except Exception as exc:  # handed to the caller with the others' results
            return exc

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, specs))


def clear_memory_cache() -> None:
    with _lock:
        _memory.clear()
