"""Loaded kernels, cached per (device, target, variant), and their launch on a stream.

The first call for a variant compiles it (or reads it from the disk cache) and loads it on the device; later calls
find the function handle in a dictionary, so the per-call path does no file reading, hashing or compiling.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
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
    if 0 in grid3:  # no blocks: nothing to launch (the drivers refuse an empty grid)
        return
    backend_for(target.vendor).launch(fn, grid3, (threads, 1, 1), smem_bytes, params, stream_handle, overlap)


def _launch_nothing(args_address: int, stream_handle: int) -> None:
    """The launch of an empty grid, which the drivers refuse: there is nothing to run."""


SIGNATURES_KEPT = 4096  # launch states a family keeps; past this many its cache starts over


def remember(cache: dict, key: Any, value: Any) -> Any:
    """Store ``value`` under ``key`` in a family's cache of launch states and return it. A cache that reaches
    SIGNATURES_KEPT entries is emptied first: calls whose shapes change every time (a key length growing token by
    token) must not grow it without bound."""
    if len(cache) >= SIGNATURES_KEPT:
        cache.clear()
    cache[key] = value
    return value


class ThreadParams:
    """A launch's parameter struct kept for one thread (the driver copies the parameters at launch, so the struct
    serves every call), the kernel-parameter array that points at it, and the addresses its tensor maps point at."""

    __slots__ = ("struct", "address", "size", "args", "args_address", "reset", "addresses")

    def __init__(self, struct: ctypes.Structure, template: ctypes.Structure, keep: int, maps: int) -> None:
        self.struct = struct
        self.address, self.size = ctypes.addressof(struct), ctypes.sizeof(struct)
        self.args = (ctypes.c_void_p * 1)(self.address)
        self.args_address = ctypes.addressof(self.args)
        # memmove arguments that set the fields after the first ``keep`` bytes (the maps) to the template's
        self.reset = (self.address + keep, ctypes.addressof(template) + keep, self.size - keep)
        self.addresses: list = [None] * maps


@dataclass(frozen=True)
class Launch:
    """Everything of one launch that does not change between calls of the same signature (shapes, strides, dtype,
    options): the function, grid, block, shared memory and a parameter struct whose per-call fields (pointers,
    scale) each call sets on a struct kept per thread, reset to the template first. Families keep these per
    signature so that a call does no lookup beyond one dictionary access."""

    target: Target
    fn: Any
    grid: int
    threads: int
    smem_bytes: int
    params: ctypes.Structure
    overlap: bool = False  # launched to overlap the previous kernel's end (the kernel waits for it)
    # (map field, pointer field): bulk-copy maps at the start of the struct, pointed at each call's tensors
    tensor_maps: tuple[tuple[str, str], ...] = ()
    _per_thread: threading.local = field(default_factory=threading.local, init=False, repr=False, compare=False)
    _map_offsets: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)  # by tensor_maps entry
    _maps_end: int = field(default=0, init=False, repr=False, compare=False)  # the first byte after the maps
    _go: Any = field(default=None, init=False, repr=False, compare=False)  # the driver's launch, made ready

    def __post_init__(self) -> None:
        if self.tensor_maps:  # they must lead the struct
            struct = type(self.params)
            members = [getattr(struct, map_name) for map_name, _ in self.tensor_maps]
            end = 0
            for member in sorted(members, key=lambda m: m.offset):
                if member.offset != end:
                    raise ValueError(f"the tensor maps of {struct.__name__} must be its first fields")
                end += member.size
            object.__setattr__(self, "_map_offsets", tuple(member.offset for member in members))
            object.__setattr__(self, "_maps_end", end)
        if self.grid == 0:  # no blocks (packed sequences without query rows): nothing to launch
            object.__setattr__(self, "_go", _launch_nothing)
            return
        object.__setattr__(self, "_go", backend_for(self.target.vendor).driver.launcher(
            self.fn, (self.grid, 1, 1), (self.threads, 1, 1), self.smem_bytes, self.overlap))

    def __call__(self, stream_handle: int, **fields: Any) -> None:
        self.send(self.fill(fields), stream_handle)

    def fill(self, fields: dict[str, Any]) -> ThreadParams:
        """This thread's struct with the per-call ``fields`` set on the template's other fields (and its tensor maps
        pointed at their tensors); the launches of one call signature that share the template can all be sent it."""
        params = self._mine()
        ctypes.memmove(*params.reset)
        struct = params.struct
        for name, value in fields.items():
            setattr(struct, name, value)
        if self.tensor_maps:
            self._repoint_maps(params, fields)
        return params

    def params_from(self, template_address: int) -> ThreadParams:
        """This thread's struct set to a copy of the struct at ``template_address`` (of this launch's type; launches
        without tensor maps), for a caller that sets its per-call fields on ``ThreadParams.struct`` itself: a family
        that keeps a template per call signature, whose per-call fields are few."""
        params = self._mine()
        ctypes.memmove(params.address, template_address, params.size)
        return params

    def send(self, params: ThreadParams, stream_handle: int) -> None:
        """Launch with ``params`` (from ``fill`` or ``params_from`` of this launch or of one sharing its template) on
        the stream."""
        self._go(params.args_address, stream_handle)

    def _mine(self) -> ThreadParams:
        """The calling thread's struct and argument array, made on its first call."""
        params = getattr(self._per_thread, "params", None)
        if params is None:
            params = self._per_thread.params = self._thread_params()
        return params

    def _thread_params(self) -> ThreadParams:
        """A copy of the template for the calling thread; with tensor maps at an address aligned for them."""
        struct_type = type(self.params)
        if self.tensor_maps:
            struct = backend_for(self.target.vendor).driver.aligned_struct(struct_type)
            ctypes.memmove(ctypes.addressof(struct), ctypes.addressof(self.params), ctypes.sizeof(struct_type))
        else:
            struct = struct_type.from_buffer_copy(self.params)
        return ThreadParams(struct, self.params, self._maps_end, len(self.tensor_maps))

    def _repoint_maps(self, params: ThreadParams, fields: dict[str, Any]) -> None:
        """Point each map of this thread's struct at its call's tensor, only where the address changed: re-pointing
        is a driver call."""
        addresses = params.addresses
        for i, (_, pointer) in enumerate(self.tensor_maps):
            address = fields[pointer]
            if addresses[i] != address:
                backend_for(self.target.vendor).driver.set_tensor_map_address(
                    ctypes.addressof(params.struct) + self._map_offsets[i], address, self.fn)
                addresses[i] = address
