"""Attention as torch operators, and the public functions that call them.

The path of one call, all of it in this file down to the kernel family's ``run``:

    attention(q, k, v, ...)                 validate (support.py), no GPU work
      -> torch.ops.portattn.attention        the operator (attention_out with ``out=``): torch.compile and CUDA graphs
                                             see one opaque call; its fake implementation gives the output's layout
        -> _forward_into                     empty shapes, the layout the kernels read, scale >= 0
          -> kernels.forward.run             target, variant, loaded function, parameters, launch

``portattn::attention(q, k, v, causal, scale, return_lse) -> (out, lse)`` allocates its output;
``portattn::attention_out(q, k, v, out, causal, scale, return_lse) -> lse`` writes into ``out``. ``lse`` is
float32 ``[batch, heads_q, seq_q]`` when ``return_lse`` is true, else an empty float32 tensor of shape ``[0]``.
"""
# No ``from __future__ import annotations``: torch 2.4 infers the operator schemas from real annotations.
import math
from typing import Optional, Tuple, Union

import torch

from ..kernels import forward
from .support import NO_BACKWARD, gpu_problem, options_problem, qkv_problem, sdpa_problem


def _in_kernel_layout(t: torch.Tensor) -> bool:
    """Whether the kernels can use ``t`` in place: unit stride along head_dim and 16-byte aligned rows."""
    per_16_bytes = 16 // t.element_size()
    return t.stride(3) == 1 and t.data_ptr() % 16 == 0 and all(
        t.shape[i] == 1 or t.stride(i) % per_16_bytes == 0 for i in range(3)
    )


def _kernel_layout(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when the kernels can read it in place, else a fresh contiguous copy."""
    return t if _in_kernel_layout(t) else torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def _new_lse(q: torch.Tensor, return_lse: bool) -> torch.Tensor:
    shape = q.shape[:3] if return_lse else (0,)
    return torch.empty(shape, dtype=torch.float32, device=q.device)


def _forward_into(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: Optional[torch.Tensor], causal: bool, scale: float) -> None:
    if q.numel() == 0:
        return
    if k.shape[2] == 0:  # no keys: an empty softmax, as the math reference computes it
        out.zero_()
        if lse is not None:
            lse.fill_(-math.inf)
        return
    if scale < 0:  # the kernels take scale >= 0: softmax((q k^T) scale) = softmax(((-q) k^T) (-scale))
        q, scale = -q, -scale
    # The kernels store pairs of elements: an output with unaligned rows is written through a temporary.
    dest = out if _in_kernel_layout(out) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    with torch.cuda.device(q.device):
        forward.run(_kernel_layout(q), _kernel_layout(k), _kernel_layout(v), dest, lse, causal, scale)
    if dest is not out:
        out.copy_(dest)


@torch.library.custom_op("portattn::attention", mutates_args=(), device_types="cuda")
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                 return_lse: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention into a new tensor laid out like ``q``; returns ``(out, lse)``."""
    out, lse = torch.empty_like(q), _new_lse(q, return_lse)
    _forward_into(q, k, v, out, lse if return_lse else None, causal, scale)
    return out, lse


@attention_op.register_fake
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                    return_lse: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), _new_lse(q, return_lse)


def _refuse_backward(ctx: object, grad_out: torch.Tensor, grad_lse: torch.Tensor) -> None:
    raise NotImplementedError(NO_BACKWARD)


attention_op.register_autograd(_refuse_backward)


@torch.library.custom_op("portattn::attention_out", mutates_args=("out",), device_types="cuda")
def attention_out_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool,
                     scale: float, return_lse: bool) -> torch.Tensor:
    """Attention written into ``out``; returns ``lse``."""
    lse = _new_lse(q, return_lse)
    _forward_into(q, k, v, out, lse if return_lse else None, causal, scale)
    return lse


@attention_out_op.register_fake
def _attention_out_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool,
                        scale: float, return_lse: bool) -> torch.Tensor:
    return _new_lse(q, return_lse)


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
              scale: Optional[float] = None, return_lse: bool = False,
              out: Optional[torch.Tensor] = None) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
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
    problem = qkv_problem(q, k, v) or options_problem(causal, scale)
    if problem:
        raise problem.error
    if out is not None:
        _check_out(out, q)
    return call_op(q, k, v, causal, scale, return_lse, out)


def call_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: Optional[float],
            return_lse: bool, out: Optional[torch.Tensor]) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """The operator call for validated arguments."""
    problem = gpu_problem(q)
    if problem:
        raise problem.error
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    if out is None:
        out, lse = torch.ops.portattn.attention(q, k, v, causal, scale, return_lse)
    else:
        lse = torch.ops.portattn.attention_out(q, k, v, out, causal, scale, return_lse)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on the cases portattn supports.

    ``attn_mask`` and ``dropout_p > 0`` raise ``NotImplementedError``. Inputs are 4-D
    ``[batch, heads, seq, head_dim]``; different query and key/value head counts need ``enable_gqa=True``.
    """
    problem = sdpa_problem(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if problem:
        raise problem.error
    return call_op(query, key, value, is_causal, scale, False, None)  # type: ignore[return-value]
