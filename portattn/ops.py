"""The forward as torch operators, so that ``torch.compile`` and CUDA graphs see one opaque call.

``portattn::attention(q, k, v, causal, scale, return_lse) -> (out, lse)`` allocates its output;
``portattn::attention_out(q, k, v, out, causal, scale, return_lse) -> lse`` writes into ``out``. ``lse`` is
float32 ``[batch, heads_q, seq_q]`` when ``return_lse`` is true, else an empty float32 tensor of shape ``[0]``.
Arguments are validated by :func:`portattn.attention` before the operators are called.
"""
# No ``from __future__ import annotations``: torch 2.4 infers the operator schemas from real annotations.
import math
from typing import Optional, Tuple

import torch

NO_BACKWARD = ("portattn has no backward pass yet: inputs must not require grad "
                "(use torch.no_grad() or detach them)")


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
    from .forward import run_forward

    if scale < 0:  # the kernels take scale >= 0: softmax((q k^T) scale) = softmax(((-q) k^T) (-scale))
        q, scale = -q, -scale
    # The kernels store pairs of elements: an output with unaligned rows is written through a temporary.
    dest = out if _in_kernel_layout(out) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    with torch.cuda.device(q.device):
        run_forward(_kernel_layout(q), _kernel_layout(k), _kernel_layout(v), dest, lse, causal, scale)
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
