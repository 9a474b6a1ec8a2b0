"""portattn: one FlashAttention kernel source for NVIDIA and AMD GPUs."""
from __future__ import annotations

__version__ = "0.1.0"

import torch as _torch  # noqa: E402
from packaging.version import Version as _Version  # noqa: E402

if _Version(_torch.__version__).release < (2, 4):
    raise ImportError(f"portattn needs torch >= 2.4, found {_torch.__version__}")

from .errors import CompileError, DriverError, PortattnError, UnsupportedTargetError  # noqa: E402
from .target import Target, available_targets  # noqa: E402
from .api import attention, scaled_dot_product_attention  # noqa: E402
from .sdpa_patch import SdpaStats, disable_sdpa_patch, enable_sdpa_patch, patch_sdpa  # noqa: E402

__all__ = [
    "CompileError",
    "DriverError",
    "PortattnError",
    "SdpaStats",
    "Target",
    "UnsupportedTargetError",
    "attention",
    "disable_sdpa_patch",
    "enable_sdpa_patch",
    "patch_sdpa",
    "available_targets",
    "scaled_dot_product_attention",
    "__version__",
]
