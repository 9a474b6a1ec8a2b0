"""AMD driver layer: load code objects with HIP's module API and launch them on a given stream (hip-python).

Same interface as the CUDA layer: ``load(binary, device_index) -> Module``, ``Module.function(name)`` and
``launch(function, grid, block, smem_bytes, params, stream_handle)``. The ``hip`` module of hip-python is a
parameter everywhere (``load(..., hip=fake)``) so that marshalling can be tested without a GPU.

Dynamic shared memory (LDS) needs no opt-in on AMD: a kernel may take the whole 64 KiB per workgroup at launch,
and HIP's ``hipFuncSetAttribute`` does nothing there (it also applies to host-side kernel stubs, not module
functions), so it is not called.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from ..errors import DriverError

_LDS_PER_WORKGROUP = 64 * 1024


def default_hip() -> ModuleType:
    """hip-python's ``hip`` module, pointed at the installed ROCm runtime first."""
    from .rocm_libs import prepare_process_env

    prepare_process_env()
    try:
        from hip import hip
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise DriverError("hip", "import hip", "ImportError", f"the AMD backend needs hip-python: {exc}") from exc
    return hip


def _error_name(hip: Any, err: Any) -> str:
    try:
        name = hip.hipGetErrorName(err)
    except Exception:  # a name is a courtesy; the code is what matters
        return str(err)
    name = name[-1] if isinstance(name, tuple) else name
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _check(hip: Any, result: Any, call: str, detail: Callable[[], str] | None = None) -> Any:
    """Unpack hip-python's ``(hipError_t, *outputs)``; any code but hipSuccess raises DriverError (with
    ``detail()`` appended to the error name when given)."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != hip.hipError_t.hipSuccess:
        name = _error_name(hip, err)
        raise DriverError("hip", call, err, f"{name}; {detail()}" if detail else name)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


class _OnDevice:
    """Make ``device_index`` the calling thread's current HIP device for a block, then restore the previous one."""

    def __init__(self, hip: Any, device_index: int) -> None:
        self.hip, self.device_index, self.previous = hip, device_index, None

    def __enter__(self) -> None:
        current = _check(self.hip, self.hip.hipGetDevice(), "hipGetDevice")
        if current != self.device_index:
            _check(self.hip, self.hip.hipSetDevice(self.device_index), "hipSetDevice")
            self.previous = current

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            _check(self.hip, self.hip.hipSetDevice(self.previous), "hipSetDevice")


@dataclass
class Function:
    handle: Any
    name: str
    device_index: int
    hip: Any = field(repr=False)


class Module:
    """A code object loaded on one device."""

    def __init__(self, handle: Any, device_index: int, hip: Any, binary: bytes) -> None:
        self.handle = handle
        self.device_index = device_index
        self.hip = hip
        self._binary = binary  # kept alive as long as the module

    def function(self, name: str) -> Function:
        with _OnDevice(self.hip, self.device_index):
            fn = _check(self.hip, self.hip.hipModuleGetFunction(self.handle, name.encode()),
                        f"hipModuleGetFunction({name})")
        return Function(fn, name, self.device_index, self.hip)

    def unload(self) -> None:
        if self.handle is not None:
            with _OnDevice(self.hip, self.device_index):
                _check(self.hip, self.hip.hipModuleUnload(self.handle), "hipModuleUnload")
            self.handle = None


def load(binary: bytes, device_index: int, hip: Any = None) -> Module:
    """Load an AMDGPU code object on device ``device_index``."""
    hip = hip if hip is not None else default_hip()
    binary = bytes(binary)
    with _OnDevice(hip, device_index):
        handle = _check(hip, hip.hipModuleLoadData(binary), "hipModuleLoadData")
    return Module(handle, device_index, hip, binary)


def launcher(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int], smem_bytes: int,
             overlap: bool = False) -> Callable[[int, int], None]:
    """A launch of ``fn`` made ready once: ``go(args_address, stream_handle)`` launches it with the kernel-parameter
    array at ``args_address`` (the address of one by-value struct) on the stream (0: the null stream). HIP has no
    overlapping launch: ``overlap`` is never set for HIP targets, and launches keep stream order."""
    hip = fn.hip
    grid, block, smem_bytes = tuple(map(int, grid)), tuple(map(int, block)), int(smem_bytes)

    def detail() -> str:  # built only for an error
        text = f"{fn.name} grid={grid} block={block} smem={smem_bytes}"
        if smem_bytes > _LDS_PER_WORKGROUP:
            text += f" (more dynamic LDS than the {_LDS_PER_WORKGROUP} bytes a workgroup can have)"
        return text

    def go(args_address: int, stream_handle: int) -> None:
        with _OnDevice(hip, fn.device_index):
            _check(hip, hip.hipModuleLaunchKernel(fn.handle, *grid, *block, smem_bytes, int(stream_handle),
                                                  args_address, None), "hipModuleLaunchKernel", detail)
    return go


def launch(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int], smem_bytes: int,
           params: ctypes.Structure, stream_handle: int, overlap: bool = False) -> None:
    """Launch ``fn`` once with one by-value struct argument on the stream ``stream_handle`` (see ``launcher``)."""
    args = (ctypes.c_void_p * 1)(ctypes.addressof(params))  # kernelParams: a void** array with one entry
    launcher(fn, grid, block, smem_bytes, overlap)(ctypes.addressof(args), stream_handle)
