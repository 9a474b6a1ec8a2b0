"""Public entry points: ``attention`` and the SDPA-compatible ``scaled_dot_product_attention``."""
from __future__ import annotations

import math
from numbers import Real

import torch

from . import ops  # registers torch.ops.portattn
from .select import HEAD_DIMS

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"{name} must be 4-D [batch, heads, seq_len, head_dim], got shape {tuple(t.shape)}")
    return t


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; q, k and v must share a dtype")
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; supported: torch.float32, torch.float16, torch.bfloat16")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k has batch size {k.shape[0]} but q has {q.shape[0]}")
    if k.shape[3] != q.shape[3]:
        raise ValueError(f"k has head_dim {k.shape[3]} but q has {q.shape[3]}")
    hq, hk = q.shape[1], k.shape[1]
    if hk == 0 and hq != 0 or hk != 0 and hq % hk != 0:
        raise ValueError(f"q's heads ({hq}) must be a multiple of k/v's heads ({hk}) for grouped-query attention")
    if q.shape[3] not in HEAD_DIMS:
        raise ValueError(f"q has head_dim {q.shape[3]}; supported head dims: {', '.join(map(str, HEAD_DIMS))}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; all inputs must be on one device")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(ops.NO_BACKWARD)


def _check_gpu(q: torch.Tensor) -> None:
    if q.device.type != "cuda":
        raise ValueError(f"portattn runs on a GPU: q is on {q.device}, move q, k and v to a CUDA/ROCm device")


def _check_out(out: object, q: torch.Tensor) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must match q: shape {tuple(q.shape)}, dtype {q.dtype}, device {q.device}; got "
                         f"shape {tuple(out.shape)}, dtype {out.dtype}, device {out.device}")
    if q.numel() and out.stride(3) != 1:
        raise ValueError("out must have unit stride along head_dim")
    if torch.is_grad_enabled() and out.requires_grad:
        raise NotImplementedError("portattn has no backward pass yet: out must not require grad")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None, return_lse: bool = False,
              out: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention ``softmax(q @ k^T * scale) @ v`` over 4-D tensors.

    q: ``[batch, heads_q, seq_q, head_dim]``; k, v: ``[batch, heads_kv, seq_k, head_dim]`` with ``heads_q`` a
    multiple of ``heads_kv`` (grouped-query / multi-query attention). Any strides with unit stride along
    ``head_dim`` are read in place, so ``x.transpose(1, 2)`` of a ``[batch, seq, heads, head_dim]`` tensor
    needs no copy. ``causal`` masks key ``j`` for query ``i`` when ``j > i`` (upper-left aligned, like
    ``torch.nn.functional.scaled_dot_product_attention``'s ``is_causal``). ``scale`` defaults to
    ``1 / sqrt(head_dim)``. With ``return_lse`` also returns the float32 log-sum-exp of the scaled scores,
    ``[batch, heads_q, seq_q]``. ``out``, when given, receives the result and is returned.

    Runs as the operator ``torch.ops.portattn.attention`` (``attention_out`` with ``out``), so it can be traced by
    ``torch.compile`` and captured in CUDA graphs.
    """
    _check_inputs(q, k, v)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    elif isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite real number or None, got {scale!r}")
    if out is not None:
        _check_out(out, q)
    _check_gpu(q)
    if out is None:
        out, lse = torch.ops.portattn.attention(q, k, v, causal, float(scale), return_lse)
    else:
        lse = torch.ops.portattn.attention_out(q, k, v, out, causal, float(scale), return_lse)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on the cases portattn supports.

    ``attn_mask`` and ``dropout_p > 0`` raise ``NotImplementedError``. Inputs are 4-D
    ``[batch, heads, seq, head_dim]``; different query and key/value head counts need ``enable_gqa=True``.
    """
    if attn_mask is not None:
        raise NotImplementedError("attn_mask is not supported by portattn yet")
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p={dropout_p} is not supported by portattn yet (only 0.0)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if isinstance(t, torch.Tensor) and t.dim() == 4:
            continue
        got = f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must be a 4-D tensor [batch, heads, seq_len, head_dim], got {got}")
    if value.shape[3] != query.shape[3]:
        raise ValueError(f"value has head_dim {value.shape[3]} but query has {query.shape[3]}; they must match")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"query has {query.shape[1]} heads but key has {key.shape[1]}; "
                         "pass enable_gqa=True for grouped-query attention")
    return attention(query, key, value, causal=bool(is_causal), scale=scale)  # type: ignore[return-value]
