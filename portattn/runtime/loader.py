"""Loaded kernels, cached per (device, target, variant), and their launch on a stream.

The first call for a variant compiles it (or reads it from the disk cache) and loads it on the device; later calls
find the function handle in a dictionary, so the per-call path does no file reading, hashing or compiling.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Hashable

from .backend import backend_for
from .compiler import Buildable, compile_kernel
from .target import Target

_functions: dict[tuple[int, Target, Hashable], Any] = {}
_lock = threading.Lock()


def kernel_function(spec: Buildable, target: Target, device_index: int) -> Any:
    """The loaded kernel of ``spec`` (a hashable variant description) on device ``device_index``."""
    key = (device_index, target, spec)
    fn = _functions.get(key)
    if fn is None:
        compiled = compile_kernel(spec, target)
        fn = backend_for(target.vendor).load_function(compiled.binary, device_index, spec.function)
        with _lock:
            _functions[key] = fn
    return fn


def launch(target: Target, fn: Any, grid: int | tuple[int, int, int], threads: int, smem_bytes: int,
           params: ctypes.Structure, stream_handle: int, overlap: bool = False) -> None:
    """Launch ``fn`` with ``threads`` threads per block and one by-value parameter struct; ``overlap``: it may start
    before the previous kernel on the stream ends (``Target.overlapping_launches``; the kernel waits for it)."""
    grid3 = (grid, 1, 1) if isinstance(grid, int) else grid
    backend_for(target.vendor).launch(fn, grid3, (threads, 1, 1), smem_bytes, params, stream_handle, overlap)


SIGNATURES_KEPT = 4096  # launch states a family keeps; past this many its cache starts over


def remember(cache: dict, key: Any, value: Any) -> Any:
    """Store ``value`` under ``key`` in a family's cache of launch states and return it. A cache that reaches
    SIGNATURES_KEPT entries is emptied first: calls whose shapes change every time (a key length growing token by
    token) must not grow it without bound."""
    if len(cache) >= SIGNATURES_KEPT:
        cache.clear()
    cache[key] = value
    return value


@dataclass(frozen=True)
class Launch:
    """Everything of one launch that does not change between calls of the same signature (shapes, strides, dtype,
    options): the function, grid, block, shared memory and a parameter struct whose per-call fields (pointers,
    scale) the caller sets on a copy. Families keep these per signature so that a call does no lookup beyond one
    dictionary access."""

    target: Target
    fn: Any
    grid: int
    threads: int
    smem_bytes: int
    params: ctypes.Structure
    overlap: bool = False  # launched to overlap the previous kernel's end (the kernel waits for it)
    tensor_maps: tuple[tuple[str, str], ...] = ()  # (map field, pointer field): maps re-pointed on every call

    def __call__(self, stream_handle: int, **fields: Any) -> None:
        if self.tensor_maps:
            driver = backend_for(self.target.vendor).driver
            params = driver.aligned_struct(type(self.params))
            ctypes.memmove(ctypes.addressof(params), ctypes.addressof(self.params), ctypes.sizeof(params))
        else:
            params = type(self.params).from_buffer_copy(self.params)
        for name, value in fields.items():
            setattr(params, name, value)
        for map_name, pointer in self.tensor_maps:
            driver.set_tensor_map_address(ctypes.addressof(params) + getattr(type(params), map_name).offset,
                                          getattr(params, pointer))
        launch(self.target, self.fn, self.grid, self.threads, self.smem_bytes, params, stream_handle, self.overlap)
