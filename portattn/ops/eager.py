"""Repeated eager inference calls: a call of ``portattn.attention``, of the SDPA route or of
``attention_with_kvcache`` (ops/kvcache.py) whose signature (shapes, strides, dtypes, devices, options, target
settings) ran before on plain tensors, launching the kernels on its inputs directly, launches the same kernels
again, without the checks, the layout work and the kernel choice. The host cost of one call matters when decoding:
one call per layer per token. One store holds the launches of both kinds of call, under keys of their own."""
from typing import Callable, Optional

import torch

from ..kernels.variant import KERNEL_ENV, OVERRIDES
from ..runtime import environ, loader
from ..runtime.target import LANES_ENV

# Launches a call again on new tensors of its signature (only their addresses are read): for ``attention`` and the
# SDPA route fn(q, k, v, out); for ``attention_with_kvcache`` its own arguments, giving the output.
Replay = Callable[..., object]
_replays: dict[tuple, Replay] = {}


def plain(tensors: tuple, aligned: tuple) -> bool:
    """Whether a call on ``tensors`` may replay: plain tensors that need no gradient, not while tracing, and those
    of ``aligned`` at 16-byte aligned addresses (the kernels read them in place)."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:  # loops rather than any(...): this runs on every eager call
        if type(t) is not torch.Tensor or (grad and t.requires_grad):
            return False
    for t in aligned:
        if t.data_ptr() & 15:
            return False
    return True


def signature(q: object, k: object, v: object, causal: object, scale: object, gqa: object,
              out: object = None) -> Optional[tuple]:
    """The key of an ``attention`` or SDPA call that may replay an earlier one (``plain`` tensors, a bool
    ``causal``, a float or None ``scale``; ``out``: the tensor given to receive the output, or None); else None."""
    if type(causal) is not bool or not (scale is None or type(scale) is float) or not plain((q, k, v), (q, k, v)):
        return None
    key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
           k.device, v.device, causal, scale, gqa, *settings())
    if out is None:
        return key
    if not plain((out,), (out,)):
        return None
    return key + (out.shape, out.stride(), out.dtype, out.device)


def settings() -> tuple:
    """What a signature holds besides the call: the verification overrides and the target and kernel settings
    of the environment."""
    return OVERRIDES.get(), environ.get(LANES_ENV), environ.get(KERNEL_ENV)


def replay(q: object, k: object, v: object, causal: object, scale: object, gqa: object,
           out: object = None) -> tuple[Optional[tuple], Optional[torch.Tensor]]:
    """``(key, out)``: the call's ``signature`` (None when it may not replay) and, when a call of that signature ran
    before, its output on q, k, v, in ``out`` when given (else None: the caller takes the checked path and remembers
    its launches under the key)."""
    key = signature(q, k, v, causal, scale, gqa, out)
    fn = lookup(key)
    if fn is None:
        return key, None
    if out is None:
        out = torch.empty_like(q)
    else:
        written(out)
    fn(q, k, v, out)
    return key, out


def written(out: torch.Tensor) -> None:
    """Count a write into ``out`` made without the operator (which counts its own): autograd then sees it. A tensor
    made under ``torch.inference_mode`` has no version counter (some torch versions raise when asked to bump it)."""
    if not out.is_inference():
        torch.autograd.graph.increment_version(out)


def lookup(key: Optional[tuple]) -> Optional[Replay]:
    """The launches remembered under ``key`` (None: none, or no key)."""
    return None if key is None else _replays.get(key)


def remember(key: tuple, fn: Replay) -> None:
    loader.remember(_replays, key, fn)
