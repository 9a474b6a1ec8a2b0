"""One backend per vendor: its run-time compiler and its driver behind one interface.

``backend_for("cuda")`` is NVRTC (``nvrtc.py``) with the CUDA driver (``cuda_driver.py``); ``backend_for("hip")``
is hiprtc (``hiprtc.py``) with the HIP driver (``hip_driver.py``). The modules are imported on first use, so a
machine without hip-python can still use the NVIDIA backend (and the reverse).

Compiler modules provide ``NAME``, ``version()``, ``build_arch(arch, defines)``, ``options(arch, defines)``,
``compile_source(source, arch, options) -> (binary, log)`` and ``resources(binary, log, function)``. Driver modules
provide ``load(binary, device_index) -> Module`` (``Module.function(name)``) and
``launch(function, grid, block, smem_bytes, params, stream_handle, overlap)``.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

_MODULES = {"cuda": ("nvrtc", "cuda_driver"), "hip": ("hiprtc", "hip_driver")}


@dataclass(frozen=True)
class Backend:
    """A vendor's compiler and driver."""

    vendor: str

    @functools.cached_property
    def compiler(self) -> ModuleType:
        return importlib.import_module(f"{__package__}.{_MODULES[self.vendor][0]}")

    @functools.cached_property
    def driver(self) -> ModuleType:
        return importlib.import_module(f"{__package__}.{_MODULES[self.vendor][1]}")

    @property
    def name(self) -> str:
        """The compiler's name ("nvrtc" or "hiprtc")."""
        return _MODULES[self.vendor][0]

    def load_function(self, binary: bytes, device_index: int, function: str) -> Any:
        """Load ``binary`` on the device and return its kernel ``function``."""
        return self.driver.load(binary, device_index).function(function)

    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int], smem_bytes: int,
               params: ctypes.Structure, stream_handle: int, overlap: bool = False) -> None:
        self.driver.launch(function, grid, block, smem_bytes, params, stream_handle, overlap)


@functools.lru_cache(maxsize=None)
def backend_for(vendor: str) -> Backend:
    """The backend of ``vendor`` ("cuda" or "hip")."""
    if vendor not in _MODULES:
        raise ValueError(f"unknown vendor {vendor!r}; known: {', '.join(_MODULES)}")
    return Backend(vendor)
