"""Module loading and kernel launch, one module per vendor with the same interface:

``load(binary, device_index) -> Module``, ``Module.function(name) -> Function`` and
``launch(function, grid, block, smem_bytes, params, stream_handle)``.
"""
from __future__ import annotations

from types import ModuleType


def driver_for(vendor: str) -> ModuleType:
    if vendor == "cuda":
        from . import cuda

        return cuda
    if vendor == "hip":
        from . import hip

        return hip
    raise ValueError(f"unknown vendor {vendor!r}")
