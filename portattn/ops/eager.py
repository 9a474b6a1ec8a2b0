"""Repeated eager inference calls: a call of ``portattn.attention`` or of the SDPA route whose signature (shapes,
strides, dtypes, devices, options, target settings) ran before on plain tensors, launching the kernels on its inputs
directly, launches the same kernels again, without the checks, the layout work and the kernel choice. The host
cost of one call matters when decoding: one call per layer per token."""
import os
from typing import Callable, Optional

import torch

from ..kernels.variant import KERNEL_ENV, OVERRIDES
from ..runtime import loader
from ..runtime.target import LANES_ENV

# Launches a call again on new tensors of its signature: fn(q, k, v, out) (only their addresses are read).
Replay = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]
_replays: dict[tuple, Replay] = {}


def signature(q: object, k: object, v: object, causal: object, scale: object, gqa: object) -> Optional[tuple]:
    """The key of a call that may replay an earlier one: plain tensors that need no gradient at 16-byte aligned
    addresses, a bool ``causal``, a float or None ``scale``, not while tracing; else None."""
    if (type(q) is not torch.Tensor or type(k) is not torch.Tensor or type(v) is not torch.Tensor
            or type(causal) is not bool or not (scale is None or type(scale) is float)
            or torch.compiler.is_compiling()):
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return None
    if (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15:
        return None
    return (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
            k.device, v.device, causal, scale, gqa, *settings())


def settings() -> tuple:
    """What a signature holds besides the call: the verification overrides and the target and kernel settings
    of the environment."""
    return OVERRIDES.get(), os.environ.get(LANES_ENV), os.environ.get(KERNEL_ENV)


def replay(q: object, k: object, v: object, causal: object, scale: object,
           gqa: object) -> tuple[Optional[tuple], Optional[torch.Tensor]]:
    """``(key, out)``: the call's ``signature`` (None when it may not replay) and, when a call of that signature ran
    before, its output on q, k, v (else None: the caller takes the checked path and remembers its launches under the
    key)."""
    key = signature(q, k, v, causal, scale, gqa)
    fn = None if key is None else _replays.get(key)
    if fn is None:
        return key, None
    out = torch.empty_like(q)
    fn(q, k, v, out)
    return key, out


def ran_before(q: object, k: object, v: object, causal: object, scale: object, gqa: object) -> bool:
    """Whether a call of this signature ran before (so that ``replay`` gives its output without checks)."""
    key = signature(q, k, v, causal, scale, gqa)
    return key is not None and key in _replays


def remember(key: tuple, fn: Replay) -> None:
    loader.remember(_replays, key, fn)
