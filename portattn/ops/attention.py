"""Attention as torch operators, and the public functions that call them.

The path of one call, all of it in this file down to the kernel family's ``run``:

    attention(q, k, v, ...)                 validate (support.py), no GPU work
      -> torch.ops.portattn.attention        the operator (attention_out with ``out=``): torch.compile and CUDA graphs
                                             see one opaque call; its fake implementation gives the output's layout.
                                             Eager calls on plain tensors run its body directly (no dispatch);
                                             those that need a gradient through _EagerAttention, whose autograd
                                             saves and runs the same as the operator's.
        -> _forward_into                     empty shapes, the layout the kernels read, scale >= 0
          -> kernels.forward.run             target, variant, loaded function, parameters, launch (or
             kernels.decode.run              for at most decode.MAX_QUERIES query rows, not causal)

Training: ``portattn::attention`` is differentiable through autograd. Its backward is the operator
``portattn::attention_backward`` (so AOTAutograd traces it too), which runs ``kernels.backward.run`` from the saved
q, k, v, output and LSE; nothing of size N x N is kept.

``portattn::attention(q, k, v, causal, scale, return_lse, deterministic, masks..) -> (out, lse)`` allocates its
output; ``portattn::attention_out(q, k, v, out, causal, scale, return_lse, masks..) -> lse`` writes into ``out`` (not
differentiable). ``lse`` is float32 ``[batch, heads_q, seq_q]`` when ``return_lse`` is true (the API asks for it
whenever a backward may follow), else an empty float32 tensor of shape ``[0]``. The mask arguments (``MaskArgs``,
the same in every operator): ``bottom_right`` (align the diagonal bottom-right), ``window_left``/``window_right``
(-1: unbounded), ``softcap`` (0: none), ``alibi_slopes``, ``attn_mask``, and for packed variable-length batches
``cu_seqlens_q``/``cu_seqlens_k`` with ``max_seqlen_q``/``max_seqlen_k``: q, k, v, out are then 3-D
``[total, heads, head_dim]`` and ``lse`` is ``[heads_q, total_q]``.
"""
# No ``from __future__ import annotations``: torch 2.4 infers the operator schemas from real annotations.
import functools
import math
from numbers import Real
from typing import Any, Callable, Optional, Tuple, Union

import torch

from ..kernels import backward, decode, forward
from ..kernels.masking import CAUSAL, PLAIN, Masking, window_bounds
from ..kernels.variant import OVERRIDES, allocation, capturing, forced_kernel, launch_target, new_from
from ..runtime import loader
from . import eager
from .eager import in_kernel_layout
from .support import gpu_problem, mask_4d, mask_problem, options_problem, qkv_problem, sdpa_problem


def _kernel_layout(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when the kernels can read it in place, else a fresh contiguous copy."""
    return t if in_kernel_layout(t) else torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def _lse_shape(q: torch.Tensor) -> tuple[int, ...]:
    return (q.shape[1], q.shape[0]) if q.dim() == 3 else q.shape[:3]  # packed sequences: [heads, total]


def _new_lse(q: torch.Tensor, return_lse: bool) -> torch.Tensor:
    return torch.empty(_lse_shape(q) if return_lse else (0,), dtype=torch.float32, device=q.device)


# The mask arguments of the operators, after (q, k, v, [out,] causal, scale, return_lse, [deterministic]).
MaskArgs = Tuple[bool, int, int, float, Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor],
                 Optional[torch.Tensor], int, int]
NO_MASKS: MaskArgs = (False, -1, -1, 0.0, None, None, None, None, 0, 0)


def _scalar(masks: MaskArgs) -> bool:
    """Whether the mask arguments ``masks`` hold no tensor (ALiBi slopes, a mask, sequence offsets): a launch with
    them then reads nothing of them that changes between calls of one signature."""
    return masks is NO_MASKS or not any(isinstance(m, torch.Tensor) for m in masks)


def masking_for(causal: bool, masks: MaskArgs) -> Masking:
    """The kernels' description of a call's causal flag and mask arguments."""
    bottom_right, window_left, window_right, softcap, alibi, attn_mask, cu_q, cu_k, max_q, max_k = masks
    if masks is NO_MASKS or masks == NO_MASKS:
        return CAUSAL if causal else PLAIN
    left, right = window_bounds(causal, (window_left, window_right))
    return Masking(left, right, bottom_right, softcap, alibi, attn_mask, cu_q, cu_k, max_q, max_k)


def _runs_bodies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether an eager call may run the operators' bodies without the dispatcher: plain tensors, not while tracing
    (fake or functional tensors) or under torch.func's transforms."""
    return (type(q) is torch.Tensor and type(k) is torch.Tensor and type(v) is torch.Tensor
            and not torch.compiler.is_compiling() and not eager.functorch_active())


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    """A packed [total, heads, d] tensor as the kernels' [1, heads, total, d] view (4-D tensors unchanged)."""
    return t.unsqueeze(0).transpose(1, 2) if t.dim() == 3 else t


# Launches a forward again on new tensors of its signature: fn(q, k, v, out, lse), with an LSE tensor when the
# first call had one (else None).
ForwardReplay = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]], None]


def _forward_into(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: Optional[torch.Tensor], causal: bool, scale: float,
                  masks: MaskArgs = NO_MASKS) -> Optional[ForwardReplay]:
    """The forward into ``out`` (and ``lse``). Returns how to launch the same call again on new tensors of its
    signature when it launched on the inputs themselves, without tensors among the mask arguments (else None)."""
    if q.numel() == 0:
        return None
    masking = masking_for(causal, masks)
    inputs = q, k, v
    q, k, v = _as_4d(q), _as_4d(k), _as_4d(v)
    if k.shape[2] == 0:  # no keys: an empty softmax, as the math reference computes it
        out.zero_()
        if lse is not None:
            lse.fill_(-math.inf)
        return None
    if scale < 0:  # the kernels take scale >= 0: softmax((q k^T) scale) = softmax(((-q) k^T) (-scale))
        q, scale = -q, -scale
    # The kernels store pairs of elements: an output with unaligned rows is written through a temporary.
    dest = out if in_kernel_layout(_as_4d(out)) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    q, k, v = _kernel_layout(q), _kernel_layout(k), _kernel_layout(v)
    if (decode.takes(masking) and q.shape[2] <= decode.MAX_QUERIES and forced_kernel() is None
            and decode.serves(launch_target(q.device), q.dtype, q.shape[3])):  # a few query rows: decoding
        replay: ForwardReplay = _DecodeReplay(q, k, v, _as_4d(dest), lse, masking, scale)
    else:
        launch = forward.run(q, k, v, _as_4d(dest), lse, scale, masking)

        def replay(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: Optional[torch.Tensor]) -> None:
            forward.start(launch, q, k, v, out, lse, scale, masking)
    if dest is not out:
        out.copy_(dest)
        return None
    direct = q is inputs[0] and k is inputs[1] and v is inputs[2] and _scalar(masks)
    return replay if direct else None


class _DecodeReplay:
    """The decode launches of a call (launched on creation) and of the calls of its signature with keys of any length
    and strides (in kernel layout): a new one (a cache that grows by one key per generated token) takes the launch
    state of its split count (``decode.prepare``), kept for the calls that follow."""

    __slots__ = ("masking", "scale", "last")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: Optional[torch.Tensor], masking: Masking, scale: float) -> None:
        self.masking, self.scale = masking, scale
        # (keys and the strides of k and v, launch state), replaced whole: threads may share the replay
        self.last: tuple = (None, None)
        self(q, k, v, out, lse)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: Optional[torch.Tensor]) -> None:
        layout, call = self.last
        keys = k.shape[2]
        if layout != (keys, k.stride(), v.stride()):
            call = decode.prepare(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out.transpose(1, 2), lse,
                                  None, None, None, self.masking, 0, keys)
            self.last = (keys, k.stride(), v.stride()), call
        # only addresses are read: the tensors serve as their transposed views
        decode.start(call, q, k, v, out, lse, _lengths(q.shape[0], keys, q.device), None, None, None, self.masking,
                     self.scale)


_length_tensors: dict[tuple, torch.Tensor] = {}


def _lengths(batch: int, keys: int, device: torch.device) -> torch.Tensor:
    """int32 [batch] filled with ``keys`` on ``device``, kept for the calls of that shape (a bounded store: a cache
    that grows by one key per generated token makes a new one every call). One made while a CUDA graph is captured
    is the graph's own (its fill runs when the graph is replayed: kept, later calls would read it unfilled)."""
    key = (batch, keys, device)
    t = _length_tensors.get(key)
    if t is None:
        t = torch.full((batch,), keys, dtype=torch.int32, device=device)
        if not (device.type == "cuda" and capturing()):
            loader.remember(_length_tensors, key, t)
    return t


@torch.library.custom_op("portattn::attention", mutates_args=(), device_types="cuda")
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                 return_lse: bool, deterministic: bool, bottom_right: bool, window_left: int, window_right: int,
                 softcap: float, alibi_slopes: Optional[torch.Tensor], attn_mask: Optional[torch.Tensor],
                 cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int,
                 max_seqlen_k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention into a new tensor laid out like ``q``; returns ``(out, lse)``. ``deterministic`` applies to the
    backward; the mask arguments are described in the module docstring."""
    return _attention(q, k, v, causal, scale, return_lse, (bottom_right, window_left, window_right, softcap,
                                                           alibi_slopes, attn_mask, cu_seqlens_q, cu_seqlens_k,
                                                           max_seqlen_q, max_seqlen_k))


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
               return_lse: bool, masks: MaskArgs = NO_MASKS) -> Tuple[torch.Tensor, torch.Tensor]:
    out, lse = torch.empty_like(q), _new_lse(q, return_lse)
    _forward_into(q, k, v, out, lse if return_lse else None, causal, scale, masks)
    return out, lse


@attention_op.register_fake
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                    return_lse: bool, *args: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), _new_lse(q, return_lse)


def _new_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uninitialized contiguous tensors for the gradients of q, k and v."""
    return new_from(q), new_from(k), new_from(v)


# Launches a backward again on new tensors of its signature: fn(dout, q, k, v, out, lse) -> (dq, dk, dv).
BackwardReplay = Callable[..., Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _backward_into(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, grad_lse: Optional[torch.Tensor], causal: bool, scale: float,
                   deterministic: bool, masks: MaskArgs
                   ) -> Tuple[Tuple[torch.Tensor, torch.Tensor, torch.Tensor], Optional[BackwardReplay]]:
    """The gradients, and how to launch the same backward again on new tensors of its signature when it launched on
    the tensors themselves, without the LSE's gradient or tensors among the mask arguments (else None)."""
    dq, dk, dv = _new_grads(q, k, v)
    if q.numel() == 0 or k.numel() == 0:
        return (dq.zero_(), dk.zero_(), dv.zero_()), None
    inputs = dout, q, k, v, out
    dout, q, k, v, out = (_kernel_layout(_as_4d(t)) for t in inputs)
    direct = (scale >= 0 and grad_lse is None and _scalar(masks) and lse.is_contiguous()
              and all(t is i for t, i in zip((dout, q, k, v, out), inputs)))
    negative = scale < 0  # run as the forward did: on -q with |scale|, and dq of -q is -dq
    if negative:
        q, scale = -q, -scale
    masking = masking_for(causal, masks)
    with torch.cuda.device(q.device):
        launches = backward.run(dout, q, k, v, out, lse.contiguous(),
                                None if grad_lse is None else grad_lse.float().contiguous(), _as_4d(dq), _as_4d(dk),
                                _as_4d(dv), scale, deterministic, masking)
    if not direct:
        return ((dq.neg_() if negative else dq), dk, dv), None

    def replay(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
               lse: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dq, dk, dv = _new_grads(q, k, v)
        backward.start(launches, dout, q, k, v, out, lse, None, dq, dk, dv, scale, masking)
        return dq, dk, dv
    return (dq, dk, dv), replay


@torch.library.custom_op("portattn::attention_backward", mutates_args=(), device_types="cuda")
def attention_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                          lse: torch.Tensor, grad_lse: Optional[torch.Tensor], causal: bool, scale: float,
                          deterministic: bool, bottom_right: bool, window_left: int, window_right: int,
                          softcap: float, alibi_slopes: Optional[torch.Tensor], attn_mask: Optional[torch.Tensor],
                          cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                          max_seqlen_q: int, max_seqlen_k: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``portattn::attention`` with respect to q, k and v, from the forward's output and LSE (and the
    gradient of the LSE, when the LSE was used)."""
    return _backward_into(dout, q, k, v, out, lse, grad_lse, causal, scale, deterministic,
                          (bottom_right, window_left, window_right, softcap, alibi_slopes, attn_mask, cu_seqlens_q,
                           cu_seqlens_k, max_seqlen_q, max_seqlen_k))[0]


@attention_backward_op.register_fake
def _attention_backward_fake(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             out: torch.Tensor, *args: Any) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _new_grads(q, k, v)


def _refuse_double_backward(ctx: Any, *grads: torch.Tensor) -> None:
    raise NotImplementedError("portattn's attention backward is not differentiable (no double backward)")


def _attention_backward_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    pass


attention_backward_op.register_autograd(_refuse_double_backward, setup_context=_attention_backward_setup)


_SAVED = object()  # stands for a mask argument saved with the tensors


class _TrainingCall:
    """The options of a training call that its backward reads (``masks`` apart: saved with the tensors), with the
    verification hooks of the forward's call. Eager calls of one signature without tensors among the mask arguments
    share one (``eager.Replay``: called with q, k, v and no ``out``, gives the output), which keeps the launches of
    the forward, made by the first call, and of the backward for each layout of the output's gradient, made by the
    first backward with it."""

    def __init__(self, q: torch.Tensor, causal: bool, scale: float, deterministic: bool, return_lse: bool,
                 masks: MaskArgs = NO_MASKS, kept: bool = False) -> None:
        self.causal, self.scale, self.deterministic, self.return_lse = causal, scale, deterministic, return_lse
        self.masks = masks if kept else None  # a kept call's (no tensors among them)
        self.overrides = OVERRIDES.get()
        self.forward: Optional[ForwardReplay] = None
        self.backward: dict[tuple, BackwardReplay] = {}
        self.lse = allocation(_lse_shape(q), torch.float32, q.device) if kept else None

    def new_lse(self, q: torch.Tensor) -> torch.Tensor:
        return _new_lse(q, True) if self.lse is None else new_from(self.lse)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: None) -> torch.Tensor:
        return _apply_eager(q, k, v, self, self.masks)


def _save(ctx: Any, call: _TrainingCall, masks: tuple, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          out: torch.Tensor, lse: torch.Tensor) -> None:
    """Keep what the backward reads: the tensors (the mask arguments' among them) and the call."""
    ctx.call = call
    if _scalar(masks):
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.masks = masks
    else:
        ctx.save_for_backward(q, k, v, out, lse, *[t for t in masks if isinstance(t, torch.Tensor)])
        ctx.masks = tuple(_SAVED if isinstance(t, torch.Tensor) else t for t in masks)


def _with_call_overrides(grad_fn: Callable[..., tuple]) -> Callable[..., tuple]:
    """Run a backward under the verification hooks of its forward's call (kept by ``_save``): the autograd engine
    runs the backward of GPU tensors on a thread of its own, where the caller's are not set."""
    @functools.wraps(grad_fn)
    def run(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple:
        token = OVERRIDES.set(ctx.call.overrides)
        try:
            return grad_fn(ctx, *grads)
        finally:
            OVERRIDES.reset(token)
    return run


def _saved(ctx: Any) -> tuple:
    """``(q, k, v, out, lse, masks)`` as ``_save`` kept them."""
    q, k, v, out, lse, *tensors = ctx.saved_tensors
    if not tensors:
        return q, k, v, out, lse, ctx.masks
    saved = iter(tensors)
    return q, k, v, out, lse, tuple(next(saved) if m is _SAVED else m for m in ctx.masks)


def _attention_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, causal, scale, return_lse, deterministic = inputs[:7]
    _save(ctx, _TrainingCall(q, causal, scale, deterministic, return_lse), inputs[7:], q, k, v, *output)


@_with_call_overrides
def _attention_grad(ctx: Any, grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor]) -> tuple:
    q, k, v, out, lse, masks = _saved(ctx)
    call = ctx.call
    if not call.return_lse:
        raise RuntimeError("portattn::attention was called with return_lse=False, so its backward has no LSE; "
                           "call it through portattn.attention, which asks for the LSE when a backward may follow")
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = torch.ops.portattn.attention_backward(grad_out, q, k, v, out, lse, grad_lse, call.causal, call.scale,
                                                       call.deterministic, *masks)
    return (dq, dk, dv) + (None,) * (4 + len(NO_MASKS))


attention_op.register_autograd(_attention_grad, setup_context=_attention_setup)


class _EagerAttention(torch.autograd.Function):
    """``portattn::attention`` and its autograd for eager calls on plain tensors: the operators' bodies without the
    dispatcher, whose custom-operator layer costs several hundred microseconds of host time per call. The same
    tensors are saved; a backward that builds a graph (``create_graph``) runs the backward operator, which refuses
    a double backward. Gives the output, and the LSE after it when the call asked for it."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: _TrainingCall,
                masks: MaskArgs) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        out, lse = torch.empty_like(q), call.new_lse(q)
        if call.forward is not None:
            call.forward(q, k, v, out, lse)
        else:
            call.forward = _forward_into(q, k, v, out, lse, call.causal, call.scale, masks)
        _save(ctx, call, masks, q, k, v, out, lse)
        if not call.return_lse:
            return out
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @_with_call_overrides
    def backward(ctx: Any, grad_out: Optional[torch.Tensor], grad_lse: Optional[torch.Tensor] = None) -> tuple:
        q, k, v, out, lse, masks = _saved(ctx)
        call = ctx.call
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        args = (grad_out, q, k, v, out, lse, grad_lse, call.causal, call.scale, call.deterministic)
        if torch.is_grad_enabled():
            grads = torch.ops.portattn.attention_backward(*args, *masks)
        elif grad_lse is not None or type(grad_out) is not torch.Tensor or grad_out.data_ptr() & 15:
            grads = _backward_into(*args, masks)[0]
        else:  # the layout of the output's gradient completes the backward's signature
            layout = grad_out.stride()
            launch = call.backward.get(layout)
            if launch is not None:
                grads = launch(grad_out, q, k, v, out, lse)
            else:
                grads, launch = _backward_into(*args, masks)
                if launch is not None:
                    loader.remember(call.backward, layout, launch)
        return (*grads, None, None)


# ``_EagerAttention.apply`` without the Python layer of ``torch.autograd.Function.apply`` (functorch's checks, a few
# microseconds a call): the eager path runs only outside torch.func's transforms (``eager.plain``, ``_runs_bodies``).
_apply_eager = super(torch.autograd.Function, _EagerAttention).apply


@torch.library.custom_op("portattn::attention_out", mutates_args=("out",), device_types="cuda")
def attention_out_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool,
                     scale: float, return_lse: bool, bottom_right: bool, window_left: int, window_right: int,
                     softcap: float, alibi_slopes: Optional[torch.Tensor], attn_mask: Optional[torch.Tensor],
                     cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int,
                     max_seqlen_k: int) -> torch.Tensor:
    """Attention written into ``out``; returns ``lse``."""
    lse = _new_lse(q, return_lse)
    _forward_into(q, k, v, out, lse if return_lse else None, causal, scale,
                  (bottom_right, window_left, window_right, softcap, alibi_slopes, attn_mask, cu_seqlens_q,
                   cu_seqlens_k, max_seqlen_q, max_seqlen_k))
    return lse


@attention_out_op.register_fake
def _attention_out_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool,
                        scale: float, return_lse: bool, *args: Any) -> torch.Tensor:
    return _new_lse(q, return_lse)


def _check_out(out: object, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must match q: shape {tuple(q.shape)}, dtype {q.dtype}, device {q.device}; got "
                         f"shape {tuple(out.shape)}, dtype {out.dtype}, device {out.device}")
    if q.numel() and out.stride(3) != 1:
        raise ValueError("out must have unit stride along head_dim")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, out)):
        raise RuntimeError("attention with out= is not differentiable: call it without out= when q, k or v "
                           "require grad (or under torch.no_grad())")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: Optional[float] = None, return_lse: bool = False, out: Optional[torch.Tensor] = None,
              deterministic: Optional[bool] = None, causal_align: str = "top-left",
              window: Optional[Tuple[int, int]] = None, softcap: float = 0.0,
              alibi_slopes: Optional[torch.Tensor] = None,
              attn_mask: Optional[torch.Tensor] = None) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Softmax attention ``softmax(q @ k^T * scale) @ v`` over 4-D tensors, differentiable in q, k and v.

    q: ``[batch, heads_q, seq_q, head_dim]``; k, v: ``[batch, heads_kv, seq_k, head_dim]`` with ``heads_q`` a
    multiple of ``heads_kv`` (grouped-query / multi-query attention). Any strides with unit stride along
    ``head_dim`` are read in place, so ``x.transpose(1, 2)`` of a ``[batch, seq, heads, head_dim]`` tensor
    needs no copy. ``scale`` defaults to ``1 / sqrt(head_dim)``.

    Masks: query i is aligned with key i (``causal_align="top-left"``, SDPA's ``is_causal``) or with key
    ``i + seq_k - seq_q`` (``"bottom-right"``, flash-attn's). ``causal`` hides the keys after the aligned one;
    ``window=(left, right)`` keeps only the keys from ``left`` before to ``right`` after it (-1: unbounded; with
    ``causal`` right is 0), and tiles outside the window are skipped. ``softcap > 0`` turns each logit x into
    ``softcap * tanh(x / softcap)``; ``alibi_slopes`` (float32 ``[heads_q]`` or ``[batch, heads_q]``) subtracts
    ``slope * |i + offset - j|``; ``attn_mask`` (bool, True = attend, or additive, of q's dtype or float32,
    broadcastable to ``[batch, heads_q, seq_q, seq_k]``) as in SDPA. A row that sees no key gives zeros (LSE -inf).

    With ``return_lse`` also returns the float32 log-sum-exp of the logits, ``[batch, heads_q, seq_q]``. ``out``,
    when given, receives the result and is returned (not differentiable). ``deterministic``: the backward gives
    bitwise-identical gradients from run to run (a separate dQ pass instead of atomic additions); None follows
    ``torch.are_deterministic_algorithms_enabled()``.

    Runs as the operator ``torch.ops.portattn.attention`` (``attention_out`` with ``out``), so it can be traced by
    ``torch.compile`` and captured in CUDA graphs; the backward is the operator ``portattn::attention_backward``.
    """
    if causal_align == "bottom-right" and (
            causal is False and window is None and alibi_slopes is None  # nothing depends on the diagonal
            or isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() == 4 and k.dim() == 4
            and q.shape[2] == k.shape[2]):  # as many queries as keys: the two alignments are one diagonal
        causal_align = "top-left"
    record = None
    options = _replay_options(causal_align, window, softcap)
    if (return_lse is False and options is not None and alibi_slopes is None and attn_mask is None
            and (deterministic is None or type(deterministic) is bool)):
        record, result = eager.replay(q, k, v, causal, scale, True, out, deterministic, options)
        if result is not None:
            return result
    problem = qkv_problem(q, k, v) or options_problem(causal, scale, return_lse)
    if problem:
        raise problem.error
    if deterministic is not None and not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool or None, got {type(deterministic).__name__}")
    masks = NO_MASKS
    if (causal_align != "top-left" or window is not None or not isinstance(softcap, Real) or softcap != 0.0
            or alibi_slopes is not None or attn_mask is not None):  # (a softcap of another type: mask_args says so)
        masks = mask_args(q, k, causal, causal_align, window, softcap, alibi_slopes, attn_mask)
    if out is not None:
        _check_out(out, q, k, v)
    return call_op(q, k, v, causal, scale, return_lse, out, deterministic, masks, record)


def _replay_options(causal_align: object, window: object, softcap: object) -> Optional[tuple]:
    """The mask options of an ``attention`` call for its replay key (``eager.signature``): empty for none, else
    (causal_align, window, softcap); None for values of other types than the checks take as they are."""
    if causal_align == "top-left" and window is None and type(softcap) is float and softcap == 0.0:
        return ()
    if (type(causal_align) is not str or type(softcap) not in (int, float)
            or window is not None and not (type(window) is tuple and all(type(w) is int for w in window))):
        return None
    return causal_align, window, softcap


def mask_args(q: torch.Tensor, k: torch.Tensor, causal: bool, causal_align: str,
              window: Optional[Tuple[int, int]], softcap: float, alibi_slopes: Optional[torch.Tensor],
              attn_mask: Optional[torch.Tensor], cu_seqlens: Optional[Tuple[torch.Tensor, torch.Tensor, int, int]]
              = None) -> MaskArgs:
    """The operators' mask arguments for validated 4-D (or packed 3-D, with ``cu_seqlens``) q and k; raises a
    clear error for a bad one."""
    batch = None if cu_seqlens is None else cu_seqlens[0].shape[0] - 1
    problem = mask_problem(q, k, causal_align, window, softcap, alibi_slopes, attn_mask, batch)
    if problem:
        raise problem.error
    left, right = (-1, -1) if window is None else window
    mask = None if attn_mask is None else mask_4d(attn_mask, q, k)
    cu_q, cu_k, max_q, max_k = cu_seqlens if cu_seqlens is not None else (None, None, 0, 0)
    return (causal_align == "bottom-right", int(left), int(right), float(softcap), alibi_slopes, mask, cu_q, cu_k,
            max_q, max_k)


def _inference_replay(launch: ForwardReplay) -> eager.Replay:
    """The ``eager.Replay`` of an inference call: its forward's launches, into ``out`` or a new tensor."""
    def replay(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
        if out is None:
            out = torch.empty_like(q)
        launch(q, k, v, out, None)
        return out
    return replay


def call_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: Optional[float],
            return_lse: bool, out: Optional[torch.Tensor], deterministic: Optional[bool] = None,
            masks: MaskArgs = NO_MASKS,
            record: Optional[tuple] = None) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """The operator call for validated arguments (``masks`` from ``mask_args``); an eager call that launched on its
    inputs is kept for replay under ``record`` (``eager.signature``) when given."""
    problem = gpu_problem(q)
    if problem:
        raise problem.error
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    bodies = _runs_bodies(q, k, v)
    # Eager inference: the operator's body.
    if not grad and bodies and type(out) in (torch.Tensor, type(None)):
        if out is None:
            out = torch.empty_like(q)
        else:
            eager.written(out)
        lse = _new_lse(q, True) if return_lse else None
        launched = _forward_into(q, k, v, out, lse, causal, scale, masks)
        if record is not None and launched is not None:
            replay = _inference_replay(launched)
            eager.remember(record, replay)
            if isinstance(launched, _DecodeReplay):
                eager.remember_any_length(record, k, v, replay)
    elif out is not None:
        lse = torch.ops.portattn.attention_out(q, k, v, out, causal, scale, return_lse, *masks)
    else:
        if deterministic is None:
            deterministic = torch.are_deterministic_algorithms_enabled()
        if bodies:  # eager training: the same operator bodies and saved tensors
            call = _TrainingCall(q, causal, scale, deterministic, return_lse, masks, kept=record is not None)
            result = _apply_eager(q, k, v, call, masks)
            if record is not None and call.forward is not None:
                eager.remember(record, call)
            return result
        else:
            out, lse = torch.ops.portattn.attention(q, k, v, causal, scale, True, deterministic, *masks)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on the cases portattn supports.

    ``attn_mask``: boolean (True = attend) or additive of the query's dtype, broadcastable to ``[batch, heads, seq_q,
    seq_k]``, as SDPA takes it (not together with ``is_causal``); a row that the mask hides entirely gives zeros.
    ``dropout_p > 0`` raises ``NotImplementedError``. Inputs are 4-D ``[batch, heads, seq, head_dim]``; different
    query and key/value head counts need ``enable_gqa=True``. Differentiable in query, key and value; the backward
    is deterministic when ``torch.use_deterministic_algorithms(True)`` is set. Under ``torch.autocast`` the inputs
    are cast as SDPA's are (``sdpa_autocast``).
    """
    query, key, value, attn_mask = sdpa_autocast(query, key, value, attn_mask)
    record, result = sdpa_replay(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if result is not None:
        return result
    problem = sdpa_problem(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if problem:
        raise problem.error
    return call_sdpa(query, key, value, attn_mask, is_causal, scale, record)


def sdpa_autocast(query: object, key: object, value: object, attn_mask: object) -> tuple:
    """SDPA's tensor arguments as ``torch.autocast`` hands them to SDPA (one of its lower-precision operators): while
    autocast is on for the query's device type, each floating-point tensor on that device type other than float64
    in its dtype; unchanged when it is off. The result then has the dtype SDPA's would have."""
    if not isinstance(query, torch.Tensor) or not _any_autocast():
        return query, key, value, attn_mask
    kind = query.device.type
    dtype = _autocast_dtype(kind)
    if dtype is None:
        return query, key, value, attn_mask
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
                 and t.device.type == kind else t for t in (query, key, value, attn_mask))


# Whether autocast is on for any device type (one call into torch; True where torch lacks it).
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _autocast_dtype(kind: str) -> Optional[torch.dtype]:
    """The dtype ``torch.autocast`` casts to on devices of type ``kind``, or None while it is off there."""
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


def sdpa_replay(query: object, key: object, value: object, attn_mask: object, dropout_p: object, is_causal: object,
                scale: object, enable_gqa: object) -> tuple[Optional[tuple], Optional[torch.Tensor]]:
    """``eager.replay`` for an SDPA call without a mask or dropout; ``(None, None)`` for any other."""
    if attn_mask is not None or type(dropout_p) not in (int, float) or dropout_p != 0 or type(enable_gqa) is not bool:
        return None, None
    return eager.replay(query, key, value, is_causal, scale, enable_gqa)


def call_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor],
              is_causal: bool, scale: Optional[float], record: Optional[tuple] = None) -> torch.Tensor:
    """The operator call for an SDPA call that passed ``sdpa_problem`` (``record``: as in ``call_op``)."""
    masks = NO_MASKS if attn_mask is None else mask_args(query, key, False, "top-left", None, 0.0, None, attn_mask)
    return call_op(query, key, value, is_causal, scale, False, None, None, masks, record)  # type: ignore
