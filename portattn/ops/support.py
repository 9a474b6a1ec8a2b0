"""Which calls portattn takes: one rule for ``portattn.attention``, ``scaled_dot_product_attention`` and the SDPA
patch.

Each check returns an :class:`Unsupported` (a short reason, which the SDPA patch counts, and the exception that the
API raises) or None. The checks never touch the GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import torch

from ..kernels.variant import HEAD_DIMS

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Unsupported:
    """Why a call is not taken: ``reason`` names the rule (the SDPA patch's fallback reason), ``error`` is what the
    API raises."""

    reason: str
    error: Exception


def check_dims(name: str, t: object, dims: int, layout: str) -> torch.Tensor:
    """``t``, checked to be a ``dims``-D tensor (``layout`` names its dimensions in the message); raises a TypeError
    or ValueError naming ``name`` otherwise."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D {layout}, got shape {tuple(t.shape)}")
    return t


def _tensor_problem(name: str, t: object) -> Unsupported | None:
    if not isinstance(t, torch.Tensor):
        return Unsupported("ndim", TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}"))
    if t.dim() != 4 or t.layout != torch.strided:
        return Unsupported("ndim", ValueError(
            f"{name} must be 4-D [batch, heads, seq_len, head_dim], got shape {tuple(t.shape)}"))
    return None


def qkv_problem(q: object, k: object, v: object, names: tuple[str, str, str] = ("q", "k", "v")) -> Unsupported | None:
    """The rule for q, k and v (called ``names`` in the messages): 4-D strided tensors of one supported dtype on one
    device, k and v of one shape, a supported head dim shared by all three, query heads a multiple of key/value
    heads."""
    qn, kn, vn = names
    for name, t in zip(names, (q, k, v)):
        problem = _tensor_problem(name, t)
        if problem:
            return problem
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    for name, t in ((kn, k), (vn, v)):
        if t.dtype != q.dtype:
            return Unsupported("dtype", TypeError(
                f"{name} has dtype {t.dtype} but {qn} has {q.dtype}; {qn}, {kn} and {vn} must share a dtype"))
    if q.dtype not in SUPPORTED_DTYPES:
        return Unsupported("dtype", TypeError(
            f"{qn} has dtype {q.dtype}; supported: torch.float32, torch.float16, torch.bfloat16"))
    for name, t in ((kn, k), (vn, v)):
        if t.shape[3] != q.shape[3]:
            return Unsupported("head_dim", ValueError(f"{name} has head_dim {t.shape[3]} but {qn} has {q.shape[3]}"))
    if q.shape[3] not in HEAD_DIMS:
        return Unsupported("head_dim", ValueError(
            f"{qn} has head_dim {q.shape[3]}; supported head dims: {', '.join(map(str, HEAD_DIMS))}"))
    if k.shape != v.shape:
        return Unsupported("shape", ValueError(
            f"{kn} and {vn} must have the same shape, got {kn} {tuple(k.shape)} and {vn} {tuple(v.shape)}"))
    if k.shape[0] != q.shape[0]:
        return Unsupported("shape", ValueError(f"{kn} has batch size {k.shape[0]} but {qn} has {q.shape[0]}"))
    hq, hk = q.shape[1], k.shape[1]
    if hk == 0 and hq != 0 or hk != 0 and hq % hk != 0:
        return Unsupported("gqa", ValueError(
            f"{qn}'s heads ({hq}) must be a multiple of {kn}/{vn}'s heads ({hk}) for grouped-query attention"))
    for name, t in ((kn, k), (vn, v)):
        if t.device != q.device:
            return Unsupported("device", ValueError(
                f"{name} is on {t.device} but {qn} is on {q.device}; all inputs must be on one device"))
    return None


def gpu_problem(q: torch.Tensor) -> Unsupported | None:
    if q.device.type != "cuda":
        return Unsupported("device", ValueError(
            f"portattn runs on a GPU: q is on {q.device}, move q, k and v to a CUDA/ROCm device"))
    return None


def options_problem(causal: object, scale: object, return_lse: object = False) -> Unsupported | None:
    if not isinstance(causal, bool):
        return Unsupported("arguments", TypeError(f"causal must be a bool, got {type(causal).__name__}"))
    if not isinstance(return_lse, bool):
        return Unsupported("arguments", TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}"))
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale)):
        return Unsupported("arguments", TypeError(f"scale must be a finite real number or None, got {scale!r}"))
    return None


def sdpa_problem(query: object, key: object, value: object, attn_mask: object, dropout_p: object, is_causal: object,
                 scale: object, enable_gqa: object) -> Unsupported | None:
    """The rule for a ``scaled_dot_product_attention`` call: the arguments SDPA takes, no dropout, the q/k/v rule,
    different head counts only with ``enable_gqa=True``, and a boolean or additive mask (of the query's dtype) that
    broadcasts to the scores."""
    if not isinstance(enable_gqa, bool) or not isinstance(dropout_p, (int, float)):
        return Unsupported("arguments", TypeError(
            f"enable_gqa must be a bool and dropout_p a number, got {enable_gqa!r} and {dropout_p!r}"))
    problem = options_problem(is_causal, scale)
    if problem:
        return problem
    for name, t in (("query", query), ("key", key), ("value", value)):
        problem = _tensor_problem(name, t)
        if problem:
            return problem
    if attn_mask is not None and is_causal:
        return Unsupported("attn_mask", ValueError("attn_mask and is_causal cannot both be set (as in SDPA)"))
    if dropout_p != 0:
        return Unsupported("dropout", NotImplementedError(
            f"dropout_p={dropout_p} is not supported by portattn yet (only 0.0)"))
    assert isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor)
    if query.shape[1] != key.shape[1] and not enable_gqa:
        return Unsupported("gqa", ValueError(f"query has {query.shape[1]} heads but key has {key.shape[1]}; "
                                             "pass enable_gqa=True for grouped-query attention"))
    problem = qkv_problem(query, key, value, ("query", "key", "value"))
    if problem is None and attn_mask is not None:
        problem = _attn_mask_problem(attn_mask, query, key, (torch.bool, query.dtype))
    return problem


def mask_problem(q: torch.Tensor, k: torch.Tensor, causal_align: object, window: object, softcap: object,
                 alibi_slopes: object, attn_mask: object, batch: int | None = None) -> Unsupported | None:
    """The rule for the mask options of ``attention`` and the flash-attn functions, for validated q and k (4-D
    ``[batch, heads, seq, head_dim]``, or packed 3-D ``[total, heads, head_dim]`` of ``batch`` sequences)."""
    if causal_align not in ("top-left", "bottom-right"):
        return Unsupported("arguments", ValueError(
            f"causal_align must be 'top-left' or 'bottom-right', got {causal_align!r}"))
    if window is not None and not (isinstance(window, (tuple, list)) and len(window) == 2
                                   and all(isinstance(w, int) and not isinstance(w, bool) and w >= -1
                                           for w in window)):
        return Unsupported("arguments", ValueError(
            f"window must be a pair of ints (left, right), each >= 0 or -1 for unbounded, got {window!r}"))
    if isinstance(softcap, bool) or not isinstance(softcap, Real) or not math.isfinite(softcap) or softcap < 0:
        return Unsupported("arguments", ValueError(f"softcap must be a finite number >= 0 (0: none), got {softcap!r}"))
    heads_q = q.shape[-2] if q.dim() == 3 else q.shape[1]
    batch = q.shape[0] if q.dim() == 4 else batch
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor):
            return Unsupported("arguments", TypeError(
                f"alibi_slopes must be a torch.Tensor, got {type(alibi_slopes).__name__}"))
        if (alibi_slopes.dtype != torch.float32 or alibi_slopes.device != q.device or alibi_slopes.dim() not in (1, 2)
                or alibi_slopes.shape[-1] != heads_q or alibi_slopes.stride(-1) != 1
                or alibi_slopes.dim() == 2 and alibi_slopes.shape[0] != batch):
            return Unsupported("arguments", ValueError(
                f"alibi_slopes must be float32 [heads_q] or [batch, heads_q] with unit stride along heads, on "
                f"{q.device}, batch = {batch}, heads_q = {heads_q}; got {alibi_slopes.dtype} "
                f"{tuple(alibi_slopes.shape)} on {alibi_slopes.device}"))
        if alibi_slopes.requires_grad and torch.is_grad_enabled():
            return Unsupported("arguments", NotImplementedError("alibi_slopes cannot require grad"))
    if attn_mask is not None:
        if q.dim() == 3:
            return Unsupported("attn_mask", NotImplementedError(
                "attn_mask is not supported with packed variable-length sequences"))
        return _attn_mask_problem(attn_mask, q, k, (torch.bool, torch.float32, q.dtype))
    return None


def _attn_mask_problem(mask: object, q: torch.Tensor, k: torch.Tensor,
                       dtypes: tuple[torch.dtype, ...]) -> Unsupported | None:
    if not isinstance(mask, torch.Tensor):
        return Unsupported("attn_mask", TypeError(f"attn_mask must be a torch.Tensor, got {type(mask).__name__}"))
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if (mask.dim() > 4 or mask.dim() < 1 or mask.layout != torch.strided
            or any(m not in (1, f) for m, f in zip(reversed(mask.shape), reversed(full)))):
        return Unsupported("attn_mask", ValueError(
            f"attn_mask of shape {tuple(mask.shape)} does not broadcast to [batch, heads_q, seq_q, seq_k] = {full}"))
    if mask.dtype not in dtypes:
        return Unsupported("attn_mask", TypeError(
            f"attn_mask must be {' or '.join(map(str, dict.fromkeys(dtypes)))}, got {mask.dtype}"))
    if mask.device != q.device:
        return Unsupported("attn_mask", ValueError(f"attn_mask is on {mask.device} but q is on {q.device}"))
    if mask.requires_grad and torch.is_grad_enabled():
        return Unsupported("attn_mask", NotImplementedError("attn_mask cannot require grad (no mask gradient)"))
    return None


def mask_4d(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """A validated attention mask as the kernels read it: 4-D, size-1 dims broadcast (stride 0), unit stride along
    keys (a copy only when it has none)."""
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 4 else mask
    seq_k = k.shape[2]
    if mask.shape[3] != seq_k or (seq_k > 1 and mask.stride(3) != 1):
        mask = mask.expand(*mask.shape[:3], seq_k).contiguous()
    return mask
