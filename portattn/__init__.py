"""portattn: one FlashAttention kernel source for NVIDIA and AMD GPUs.

Layers, each a package that imports only from the ones before it: ``runtime`` (targets, compilers, cache, drivers),
``kernels`` (the kernel families: tile tables, variant choice, launch), ``ops`` (torch operators and the public
functions), ``integrations`` (the SDPA patch, flash-attn's functions, transformers' attention), ``tools`` (command
line, benchmark, report, reference, testing hooks).
The kernel sources are ``src_cuda/`` (and ``src_hip/``, made from it by ``portattn-hipify``).
"""
from __future__ import annotations

import torch as _torch
from packaging.version import Version as _Version

from .version import __version__

if _Version(_torch.__version__).release < (2, 4):
    raise ImportError(f"portattn needs torch >= 2.4, found {_torch.__version__}")

from . import _moved  # noqa: E402
from .errors import CompileError, DriverError, PortattnError, UnsupportedTargetError  # noqa: E402
from .integrations.sdpa import SdpaStats, disable_sdpa_patch, enable_sdpa_patch, patch_sdpa  # noqa: E402
from .ops.attention import attention, scaled_dot_product_attention  # noqa: E402
from .ops.kvcache import attention_with_kvcache  # noqa: E402
from .runtime.target import Target, available_targets  # noqa: E402

_moved.install()

__all__ = [
    "CompileError",
    "DriverError",
    "PortattnError",
    "SdpaStats",
    "Target",
    "UnsupportedTargetError",
    "attention",
    "attention_with_kvcache",
    "disable_sdpa_patch",
    "enable_sdpa_patch",
    "patch_sdpa",
    "available_targets",
    "scaled_dot_product_attention",
    "__version__",
]
