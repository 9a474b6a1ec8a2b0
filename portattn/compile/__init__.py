"""Kernel compilation with caching: one entry point for both vendors' run-time compilers."""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from types import ModuleType

from .. import __version__
from ..resources import Resources
from ..select import KernelSpec
from ..sources import read_source
from ..target import Target
from .cache import DiskCache


def backend_for(vendor: str) -> ModuleType:
    """The compiler module for a vendor: ``nvrtc`` for ``"cuda"``, ``hiprtc`` for ``"hip"``."""
    if vendor == "cuda":
        from . import nvrtc

        return nvrtc
    if vendor == "hip":
        from . import hiprtc

        return hiprtc
    raise ValueError(f"unknown vendor {vendor!r}")


@dataclass(frozen=True)
class CompiledKernel:
    spec: KernelSpec
    arch: str
    backend: str
    key: str
    binary: bytes
    log: str
    resources: Resources
    from_disk: bool


_memory: dict[str, CompiledKernel] = {}
_lock = threading.Lock()
_log = logging.getLogger("portattn")


def cache_key(source_digest: str, options: list[str], arch: str, backend: str, compiler_version: str) -> str:
    """Hash of everything that determines the binary."""
    blob = json.dumps([source_digest, options, arch, backend, compiler_version, __version__])
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


def compile_kernel(spec: KernelSpec, target: Target, cache: DiskCache | None = None) -> CompiledKernel:
    """Compile ``spec`` for ``target``, from memory or disk cache when possible."""
    backend = backend_for(target.vendor)
    source = read_source(target.vendor, spec.filename)
    arch = backend.build_arch(target.arch, spec.defines)
    opts = backend.options(arch, spec.defines)
    key = cache_key(source.digest, opts, arch, backend.NAME, backend.version())
    with _lock:
        hit = _memory.get(key)
    if hit is not None:
        return hit
    cache = cache if cache is not None else DiskCache()
    entry = cache.get(key)
    if entry is not None:
        meta, binary = entry
        kernel = CompiledKernel(spec, arch, backend.NAME, key, binary, meta["log"],
                                Resources(**meta["resources"]), True)
    else:
        _log.info("compiling %s for %s (first use; cached in %s)", spec.label, arch, cache.directory)
        start = time.perf_counter()
        binary, log = backend.compile_source(source, arch, opts)
        _log.info("compiled %s in %.1f s", spec.label, time.perf_counter() - start)
        res = backend.resources(binary, log, spec.function)
        cache.put(key, {"log": log, "resources": res.to_dict(), "label": spec.label, "arch": arch}, binary)
        kernel = CompiledKernel(spec, arch, backend.NAME, key, binary, log, res, False)
    with _lock:
        _memory[key] = kernel
    return kernel


def clear_memory_cache() -> None:
    with _lock:
        _memory.clear()
