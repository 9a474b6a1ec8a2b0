"""NVIDIA driver layer: load cubins into torch's primary context and launch on a given stream."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

from ..errors import DriverError

_DEFAULT_SMEM_LIMIT = 48 * 1024


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result, call: str):
    drv = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        raise DriverError("cuda", call, err, name.decode() if isinstance(name, bytes) else str(name))
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


_contexts: dict[int, object] = {}


def _primary_context(device_index: int):
    """The device's primary context (the one torch uses), retained once per process."""
    ctx = _contexts.get(device_index)
    if ctx is None:
        drv = _driver()
        _check(drv.cuInit(0), "cuInit")
        dev = _check(drv.cuDeviceGet(device_index), "cuDeviceGet")
        ctx = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _contexts[device_index] = ctx
    return ctx


class _Current:
    """Make the device's primary context current for a block, restoring the caller's afterwards."""

    def __init__(self, device_index: int) -> None:
        self.ctx = _primary_context(device_index)
        self.pushed = False

    def __enter__(self) -> None:
        drv = _driver()
        current = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(current) != int(self.ctx):
            _check(drv.cuCtxPushCurrent(self.ctx), "cuCtxPushCurrent")
            self.pushed = True

    def __exit__(self, *exc) -> None:
        if self.pushed:
            _check(_driver().cuCtxPopCurrent(), "cuCtxPopCurrent")


@dataclass
class Function:
    handle: object
    name: str
    device_index: int
    smem_limit: int = _DEFAULT_SMEM_LIMIT  # dynamic shared memory a launch may use without raising the limit
    address: int = 0  # the CUfunction and its primary context as integers, for the launch path
    context: int = 0


_launch_lib: ctypes.CDLL | None = None
_ONE_ARG = ctypes.c_void_p * 1  # kernelParams: the address of the one struct argument


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int), ("rest", ctypes.c_byte * 60)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


# CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (attribute id 6) set to 1: the kernel may start before the
# previous kernel on the stream ends (it waits for it with griddepcontrol.wait).
_OVERLAP = _LaunchAttribute(6, 0, 1)
_OVERLAP_PTR = ctypes.pointer(_OVERLAP)
_CONFIGS_KEPT = 1024  # overlapping launch configurations kept per function


def _launch_entry_points() -> ctypes.CDLL:
    """The driver's context and launch entry points through ctypes: a launch costs a C call instead of the bindings'
    argument conversion. The library is the one cuda-bindings and torch have loaded already."""
    global _launch_lib
    if _launch_lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        ptr, uint = ctypes.c_void_p, ctypes.c_uint
        for name, argtypes in (("cuCtxGetCurrent", [ctypes.POINTER(ptr)]), ("cuCtxPushCurrent_v2", [ptr]),
                               ("cuCtxPopCurrent_v2", [ctypes.POINTER(ptr)]),
                               ("cuLaunchKernel", [ptr, uint, uint, uint, uint, uint, uint, uint, ptr, ptr, ptr]),
                               ("cuLaunchKernelEx", [ctypes.POINTER(_LaunchConfig), ptr, ptr, ptr])):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        _launch_lib = lib
    return _launch_lib


_MAP_BYTES = 128
_MAP_ALIGN = 128  # the driver's CUtensorMap alignment
_U64, _U32 = ctypes.c_uint64, ctypes.c_uint32
# CUtensorMapDataType of the element types; swizzle 128B, L2 promotion 256B, out-of-bounds reads give zeros.
_MAP_DTYPES = {"float16": 6, "float32": 7, "bfloat16": 9}
_SWIZZLE_128B, _L2_PROMOTION_256B, _NO_INTERLEAVE, _OOB_ZEROS = 3, 3, 0, 0
_map_lib: ctypes.CDLL | None = None


def _map_entry_points() -> ctypes.CDLL:
    global _map_lib
    if _map_lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        ptr, uint, ints = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
        lib.cuTensorMapEncodeTiled.argtypes = [ptr, ints, uint, ptr, ctypes.POINTER(_U64), ctypes.POINTER(_U64),
                                               ctypes.POINTER(_U32), ctypes.POINTER(_U32), ints, ints, ints, ints]
        lib.cuTensorMapReplaceAddress.argtypes = [ptr, ptr]
        lib.cuTensorMapEncodeTiled.restype = lib.cuTensorMapReplaceAddress.restype = ctypes.c_int
        _map_lib = lib
    return _map_lib


def aligned_struct(struct_type: type[ctypes.Structure]) -> ctypes.Structure:
    """A zeroed ``struct_type`` at an address aligned for tensor maps (ctypes aligns to 16 bytes at most)."""
    buf = (ctypes.c_uint8 * (ctypes.sizeof(struct_type) + _MAP_ALIGN))()
    return struct_type.from_buffer(buf, -ctypes.addressof(buf) % _MAP_ALIGN)


def encode_tensor_map(dtype: str, address: int, dims: tuple[int, ...], strides_bytes: tuple[int, ...],
                      box: tuple[int, ...], device_index: int) -> bytes:
    """A tiled tensor map (CUtensorMap's 128 bytes) of a ``dtype`` tensor at ``address`` on device
    ``device_index``: ``dims`` from the innermost (unit stride) out, ``strides_bytes`` of the outer dims, copies of
    ``box`` elements per dim into 128-byte swizzled shared memory; reads past the dims give zeros."""
    rank = len(dims)
    scratch = (ctypes.c_uint8 * (_MAP_BYTES + _MAP_ALIGN))()
    at = ctypes.addressof(scratch) + (-ctypes.addressof(scratch) % _MAP_ALIGN)
    code = _in_context(int(_primary_context(device_index)), lambda: _map_entry_points().cuTensorMapEncodeTiled(
        at, _MAP_DTYPES[dtype], rank, address, (_U64 * rank)(*dims), (_U64 * (rank - 1))(*strides_bytes),
        (_U32 * rank)(*box), (_U32 * rank)(*([1] * rank)), _NO_INTERLEAVE, _SWIZZLE_128B, _L2_PROMOTION_256B,
        _OOB_ZEROS))
    _check_code(code, f"cuTensorMapEncodeTiled(dims={dims}, strides={strides_bytes}, box={box})")
    return ctypes.string_at(at, _MAP_BYTES)


def set_tensor_map_address(map_address: int, address: int, fn: Function) -> None:
    """Point the tensor map at ``map_address`` (aligned, see aligned_struct) of a launch of ``fn`` to a tensor at
    ``address``."""
    code = _in_context(fn.context, lambda: _map_entry_points().cuTensorMapReplaceAddress(map_address, address))
    _check_code(code, "cuTensorMapReplaceAddress")


def _in_context(context: int, call: Callable[[], int]) -> int:
    """The code of ``call()``, a driver call through ctypes, made with ``context`` current: pushed for the call when
    the calling thread has another one or none (autograd runs the backward on a thread of its own)."""
    lib = _launch_lib or _launch_entry_points()
    current = ctypes.c_void_p()
    _check_code(lib.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
    pushed = current.value != context
    if pushed:
        _check_code(lib.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
    try:
        return call()
    finally:
        if pushed:
            _check_code(lib.cuCtxPopCurrent_v2(ctypes.byref(current)), "cuCtxPopCurrent")


def _check_code(code: int, call: str) -> None:
    if code:
        _check((_driver().CUresult(code),), call)


class Module:
    def __init__(self, handle: object, device_index: int) -> None:
        self.handle = handle
        self.device_index = device_index

    def function(self, name: str) -> Function:
        drv = _driver()
        with _Current(self.device_index):
            fn = _check(drv.cuModuleGetFunction(self.handle, name.encode()), f"cuModuleGetFunction({name})")
            static = _check(drv.cuFuncGetAttribute(drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
                            f"cuFuncGetAttribute({name})")
        # Without an opt-in, static + dynamic shared memory must stay within the default 48 KiB.
        return Function(fn, name, self.device_index, _DEFAULT_SMEM_LIMIT - int(static), int(fn),
                        int(_primary_context(self.device_index)))


def load(binary: bytes, device_index: int) -> Module:
    """Load a cubin into the device's primary context."""
    with _Current(device_index):
        handle = _check(_driver().cuModuleLoadData(binary), "cuModuleLoadData")
    return Module(handle, device_index)


def launcher(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int], smem_bytes: int,
             overlap: bool = False) -> Callable[[int, int], None]:
    """A launch of ``fn`` made ready once: ``go(args_address, stream_handle)`` launches it with the kernel-parameter
    array at ``args_address`` (the address of one by-value struct) on the stream, in the function's primary context
    (made current for the launch when another one is, or none); ``overlap``: as a programmatic dependent launch, with
    a launch configuration made once per stream (building one costs microseconds, a dictionary lookup a tenth of
    one)."""
    if smem_bytes > fn.smem_limit:
        drv = _driver()
        with _Current(fn.device_index):
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(drv.cuFuncSetAttribute(fn.handle, attr, smem_bytes), "cuFuncSetAttribute")
        fn.smem_limit = smem_bytes
    lib = _launch_entry_points()
    get_current, launch_ex, launch_plain = lib.cuCtxGetCurrent, lib.cuLaunchKernelEx, lib.cuLaunchKernel
    context, address = fn.context, fn.address
    configs: dict[int, _LaunchConfig] = {}
    call = f"{'cuLaunchKernelEx' if overlap else 'cuLaunchKernel'}({fn.name})"

    def go(args_address: int, stream_handle: int) -> None:
        current = ctypes.c_void_p()
        code = get_current(ctypes.byref(current))
        if code or current.value != context:
            _check_code(code, "cuCtxGetCurrent")
            _in_context(context, lambda: go(args_address, stream_handle))  # runs go with the context current
            return
        if overlap:
            config = configs.get(stream_handle)
            if config is None:
                if len(configs) >= _CONFIGS_KEPT:
                    configs.clear()
                config = configs[stream_handle] = _LaunchConfig(grid, block, smem_bytes, stream_handle,
                                                                _OVERLAP_PTR, 1)
            code = launch_ex(config, address, args_address, None)
        else:
            code = launch_plain(address, *grid, *block, smem_bytes, stream_handle, args_address, None)
        if code:
            _check_code(code, call)
    return go


def launch(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int], smem_bytes: int,
           params: ctypes.Structure, stream_handle: int, overlap: bool = False) -> None:
    """Launch ``fn`` once with one by-value struct argument on the stream ``stream_handle`` (see ``launcher``)."""
    args = _ONE_ARG(ctypes.addressof(params))
    launcher(fn, grid, block, smem_bytes, overlap)(ctypes.addressof(args), stream_handle)
