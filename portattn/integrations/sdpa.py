"""Route ``torch.nn.functional.scaled_dot_product_attention`` through portattn where it can take the call.

While the patch is enabled, the module attribute ``torch.nn.functional.scaled_dot_product_attention`` is a
router: calls portattn supports go to :func:`portattn.scaled_dot_product_attention`; every other call goes to
the function that was there before, with its arguments unchanged. Code that looks the attribute up at call
time (``F.scaled_dot_product_attention(...)``, as Hugging Face transformers does) is routed; a reference taken
before the patch (``from torch.nn.functional import scaled_dot_product_attention``) is not.

The decision is the rule of ``portattn.scaled_dot_product_attention`` (``ops/support.py``); each fallback is counted
under the name of the first check that fails: ``arguments`` (arguments this router does not recognise), ``ndim`` (not
three 4-D strided tensors), ``attn_mask`` (a mask portattn does not take: not boolean or of the query's dtype, not
broadcastable, requiring grad, or given with ``is_causal``), ``dropout``, ``gqa`` (head counts differ without
``enable_gqa=True``, or do not divide), ``dtype`` (not a dtype portattn supports, or q/k/v differ), ``head_dim``,
``shape`` (batch or k/v shapes differ), ``device`` (not all on one GPU), ``empty`` (an input has no elements),
``target`` (portattn has no kernel for this GPU, dtype and head dim), ``backward`` (an input requires grad and
portattn has no backward kernel for it). Calls that require grad are taken: the result is differentiable. Under
``torch.autocast`` the router decides on, and portattn computes on, the inputs cast as autocast casts SDPA's (so the
result has SDPA's dtype); a fallback gets the arguments as they were given.
"""
from __future__ import annotations

import contextlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from ..errors import UnsupportedTargetError
from ..kernels import backward as bwd_kernels
from ..kernels import forward as fwd_kernels
from ..ops import attention as ops
from ..ops.support import sdpa_problem
from ..runtime import target as targets


def _sdpa_args(query: object, key: object, value: object, attn_mask: object = None, dropout_p: object = 0.0,
               is_causal: object = False, *, scale: object = None, enable_gqa: object = False) -> tuple:
    """SDPA's arguments in order; raises ``TypeError`` as torch's signature would."""
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


@dataclass
class SdpaStats:
    """Calls seen by one activation of the patch: routed to portattn, or to the original function (with the
    number of fallbacks per reason)."""

    portattn: int = 0
    fallback: int = 0
    fallback_reasons: Counter[str] = field(default_factory=Counter)


_lock = threading.Lock()
_original: Callable | None = None
_active: tuple[SdpaStats, ...] = ()
_target_ok: dict[tuple, bool] = {}


def _target_supports(device: torch.device, dtype: torch.dtype, head_dim: int, backward: bool = False) -> bool:
    """Whether portattn has a forward (or backward) kernel for this GPU (as ``PORTATTN_LANES`` sets it up), dtype and
    head dim."""
    try:
        target = targets.target_for(device)
    except UnsupportedTargetError:
        return False
    key = (target, dtype, head_dim, backward)
    ok = _target_ok.get(key)
    if ok is None:
        ok = _target_ok[key] = (bwd_kernels if backward else fwd_kernels).has_kernel(target, dtype, head_dim)
    return ok


def _fallback_reason(call: tuple | None) -> str | None:
    """Why portattn cannot take a call (its arguments from ``_sdpa_args``, None when they do not parse): a reason
    name, or None when it can."""
    if call is None:
        return "arguments"
    q, k, v, mask, dropout_p, is_causal, scale, enable_gqa = call
    problem = sdpa_problem(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa)
    if problem:
        return problem.reason
    if q.numel() == 0 or k.numel() == 0:
        return "empty"
    if q.device.type != "cuda":
        return "device"
    return kernel_reason(q, k, v)


def kernel_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """For valid GPU inputs: "target" when portattn has no forward kernel for their GPU, dtype and head dim,
    "backward" when one requires grad and it has no backward kernel for them, else None."""
    if not _target_supports(q.device, q.dtype, q.shape[3]):
        return "target"
    if (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
            and not _target_supports(q.device, q.dtype, q.shape[3], backward=True)):
        return "backward"
    return None


def _route(*args: object, **kwargs: object) -> torch.Tensor:
    """The patched ``scaled_dot_product_attention``: portattn when it can take the call, else the original."""
    try:
        call = _sdpa_args(*args, **kwargs)
    except TypeError:
        call = None
    if call is not None:  # under torch.autocast, the inputs SDPA would compute on
        call = ops.sdpa_autocast(*call[:4]) + call[4:]
    record, result = (None, None) if call is None else ops.sdpa_replay(*call)  # a call that ran on portattn before
    reason = None if result is not None else _fallback_reason(call)
    for stats in _active:
        if reason is None:
            stats.portattn += 1
        else:
            stats.fallback += 1
            stats.fallback_reasons[reason] += 1
    if result is not None:
        return result
    if reason is not None:
        return _original(*args, **kwargs)  # type: ignore[misc]
    q, k, v, mask, _, is_causal, scale, _ = call
    return ops.call_sdpa(q, k, v, mask, is_causal, scale, record)


def enable_sdpa_patch() -> SdpaStats:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` through portattn; returns the counters of
    this activation. Activations nest: the original function comes back when the last one is disabled."""
    global _original, _active
    stats = SdpaStats()
    with _lock:
        if not _active:
            _original = F.scaled_dot_product_attention
            F.scaled_dot_product_attention = _route
        _active = _active + (stats,)
    return stats


def disable_sdpa_patch(stats: SdpaStats | None = None) -> None:
    """End the activation ``stats`` (default: the latest one); after the last, the original function object is
    put back. Raises ``RuntimeError`` when the patch is not enabled or ``stats`` is not an active activation."""
    global _active
    with _lock:
        if not _active:
            raise RuntimeError("the portattn SDPA patch is not enabled")
        if stats is None:
            stats = _active[-1]
        if not any(s is stats for s in _active):
            raise RuntimeError("stats is not an active portattn SDPA patch activation (already disabled?)")
        _active = tuple(s for s in _active if s is not stats)
        if not _active:
            F.scaled_dot_product_attention = _original


@contextlib.contextmanager
def patch_sdpa() -> Iterator[SdpaStats]:
    """``with portattn.patch_sdpa() as stats:`` routes SDPA calls through portattn inside the block; ``stats``
    counts them (``stats.portattn``, ``stats.fallback``, ``stats.fallback_reasons``)."""
    stats = enable_sdpa_patch()
    try:
        yield stats
    finally:
        disable_sdpa_patch(stats)
