"""portattn: one FlashAttention kernel source for NVIDIA and AMD GPUs."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import CompileError, DriverError, PortattnError, UnsupportedTargetError  # noqa: E402
from .target import Target  # noqa: E402

__all__ = [
    "CompileError",
    "DriverError",
    "PortattnError",
    "Target",
    "UnsupportedTargetError",
    "__version__",
]
