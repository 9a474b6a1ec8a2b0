"""Attention over a KV cache for generation: ``attention_with_kvcache`` and its operator.

Layouts follow flash-attn (``[batch, seq, heads, head_dim]``): q ``[B, Nq, Hq, D]``; the cache ``[B, capacity, Hk, D]``
or, paged, ``[num_pages, page_size, Hk, D]`` with ``block_table`` int32 ``[B, max_pages]``. ``cache_seqlens[b]``
keys are in sequence b's cache before the call; new keys ``k``/``v`` ``[B, Nnew, Hk, D]`` are written after them,
in place, and attention covers all of them. ``cache_batch_idx`` names the cache sequence of each batch row,
``cache_leftpad`` the first cache row of each sequence (flash-attn's arguments). Masks are aligned bottom-right:
query position i of Nq is aligned with key ``L - Nq + i`` of a sequence of L keys; causal hides the keys after it, a
window ``(left, right)`` keeps the keys from ``left`` before to ``right`` after it; softcap and ALiBi slopes as in
``portattn.attention``.

The path of one call: ``attention_with_kvcache`` validates (no device sync) -> ``torch.ops.portattn.attention_with_
kvcache`` (mutates the caches when appending; torch.compile and CUDA graphs see one call; eager calls on plain
tensors run its body without dispatch) -> ``kernels.decode.run``. A repeated eager call whose signature ran before
(``_signature``: shapes, strides, dtypes, devices, options, the lengths on the GPU) replays that call's launches
(``kernels.decode.start``) without the checks: one call per layer per token.
"""
# No ``from __future__ import annotations``: torch 2.4 infers the operator schemas from real annotations.
import math
from typing import Optional, Tuple, Union

import torch

from ..kernels import decode
from ..kernels.masking import Masking, window_bounds
from ..kernels.variant import HEAD_DIMS
from . import eager
from .attention import _kernel_layout
from .eager import in_kernel_layout
from .support import SUPPORTED_DTYPES, check_dims, mask_problem, options_problem

PAGE_MULTIPLE = 16


def _new_lse(q: torch.Tensor, return_lse: bool) -> torch.Tensor:
    shape = (q.shape[0], q.shape[2], q.shape[1]) if return_lse else (0,)
    return torch.empty(shape, dtype=torch.float32, device=q.device)


@torch.library.custom_op("portattn::attention_with_kvcache", mutates_args=("k_cache", "v_cache"), device_types="cuda")
def kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
               k: Optional[torch.Tensor], v: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
               causal: bool, scale: float, num_splits: int, return_lse: bool, max_keys: int, window_left: int,
               window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
               cache_batch_idx: Optional[torch.Tensor],
               cache_leftpad: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Decode attention (see the module docstring); ``max_keys`` bounds the keys of any sequence (-1: unknown);
    ``window_left``/``window_right``: -1 unbounded."""
    return _kvcache(q, k_cache, v_cache, cache_seqlens, k, v, block_table, causal, scale, num_splits, return_lse,
                    max_keys, window_left, window_right, softcap, alibi_slopes, cache_batch_idx, cache_leftpad)


def _kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
             k: Optional[torch.Tensor], v: Optional[torch.Tensor], block_table: Optional[torch.Tensor], causal: bool,
             scale: float, num_splits: int, return_lse: bool, max_keys: int, window_left: int = -1,
             window_right: int = -1, softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
             cache_batch_idx: Optional[torch.Tensor] = None,
             cache_leftpad: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    out, lse, _ = _launch(q, k_cache, v_cache, cache_seqlens, k, v, block_table, causal, scale, num_splits,
                          return_lse, max_keys, window_left, window_right, softcap, alibi_slopes, cache_batch_idx,
                          cache_leftpad)
    return out, lse


def _launch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
            k: Optional[torch.Tensor], v: Optional[torch.Tensor], block_table: Optional[torch.Tensor], causal: bool,
            scale: float, num_splits: int, return_lse: bool, max_keys: int, window_left: int, window_right: int,
            softcap: float, alibi_slopes: Optional[torch.Tensor], cache_batch_idx: Optional[torch.Tensor],
            cache_leftpad: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, Optional[eager.Replay]]:
    """``_kvcache``, and how to launch the same call again (fn(q, k_cache, v_cache, cache_seqlens, k, v,
    block_table) gives the output) when it launched on the inputs themselves without the LSE (else None)."""
    out, lse = torch.empty_like(q), _new_lse(q, return_lse)
    if q.numel() == 0:
        return out, lse, None
    inputs = q, k, v
    if scale < 0:  # the kernels take scale >= 0
        q, scale = -q, -scale
    dest = out if in_kernel_layout(out) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    left, right = window_bounds(causal, (window_left, window_right))
    masking = Masking(left, right, True, softcap, alibi_slopes)
    q, k, v = _kernel_layout(q), None if k is None else _kernel_layout(k), None if v is None else _kernel_layout(v)
    plan = decode.run(q, k_cache, v_cache, dest, lse if return_lse else None, cache_seqlens, k, v, block_table,
                      masking, scale, num_splits, None if max_keys < 0 else max_keys, cache_batch_idx, cache_leftpad)
    if dest is not out:
        out.copy_(dest)
    if return_lse or dest is not out or any(a is not b for a, b in zip((q, k, v), inputs)):
        return out, lse, None

    def replay(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
               k: Optional[torch.Tensor], v: Optional[torch.Tensor],
               block_table: Optional[torch.Tensor]) -> torch.Tensor:
        out = torch.empty_like(q)
        decode.start(plan, q, k_cache, v_cache, out, None, cache_seqlens, k, v, block_table, masking, scale,
                     cache_batch_idx, cache_leftpad)
        return out
    return out, lse, replay


def _signature(q: object, k_cache: object, v_cache: object, cache_seqlens: object, k: object, v: object,
               block_table: object, causal: object, scale: object, num_splits: object, return_lse: object,
               window: object, softcap: object, alibi_slopes: object, cache_batch_idx: object,
               cache_leftpad: object) -> Optional[tuple]:
    """The replay key (``eager``) of a call that may replay an earlier one: ``eager.plain`` tensors, the lengths a
    tensor on q's device (no values to check), options of exact types, no LSE, ALiBi slopes, cache_batch_idx or
    cache_leftpad; else None."""
    data = (q, k_cache, v_cache) + (() if k is None and v is None else (k, v))
    if (type(causal) is not bool or not (scale is None or type(scale) is float) or type(num_splits) is not int
            or type(softcap) is not float or return_lse is not False or alibi_slopes is not None
            or cache_batch_idx is not None or cache_leftpad is not None
            or not (window is None or (type(window) is tuple and len(window) == 2
                                       and type(window[0]) is int and type(window[1]) is int))
            or not (block_table is None or type(block_table) is torch.Tensor)
            or not eager.plain(data + (cache_seqlens,), data) or cache_seqlens.device != q.device):
        return None
    return ("attention_with_kvcache", *((t.shape, t.stride(), t.dtype, t.device) for t in data + (cache_seqlens,)),
            k is None, None if block_table is None else (block_table.shape, block_table.stride(), block_table.dtype,
                                                         block_table.device),
            causal, scale, num_splits, window, softcap, *eager.settings())


@kvcache_op.register_fake
def _kvcache_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                  k: Optional[torch.Tensor], v: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                  causal: bool, scale: float, num_splits: int, return_lse: bool, max_keys: int, window_left: int,
                  window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
                  cache_batch_idx: Optional[torch.Tensor],
                  cache_leftpad: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), _new_lse(q, return_lse)


def _check_index(name: str, t: object, batch: int, device: torch.device,
                 expected: str = "an int32 tensor") -> Optional[list[int]]:
    """An int32 ``[batch]`` tensor on ``device`` or the CPU (``expected`` names what the argument may be); its
    values when on the CPU, else None (the kernels check them)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.shape != (batch,):
        what = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name} must be {expected} of shape [{batch}], got {what}")
    if t.device.type != "cpu":
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but q is on {device}")
        return None
    return t.tolist()


def check_arguments(q: object, k_cache: object, v_cache: object, cache_seqlens: object, k: object, v: object,
                    block_table: object, num_splits: object, cache_batch_idx: object = None,
                    cache_leftpad: object = None) -> int:
    """Validate without touching the device; returns the largest number of keys of a sequence (-1: not known,
    the lengths live on the device, where the kernels check them, as they check index tensors there)."""
    q = check_dims("q", q, 4, "[batch, seqlen_q, heads, head_dim]")
    k_cache = check_dims("k_cache", k_cache, 4, "[batch, capacity, heads_kv, head_dim] or pages")
    v_cache = check_dims("v_cache", v_cache, 4, "[batch, capacity, heads_kv, head_dim] or pages")
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; supported: torch.float32, torch.float16, torch.bfloat16")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; they must share a dtype")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    batch, _, heads_q, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"k_cache has head_dim {k_cache.shape[3]} but q has {head_dim}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"q has head_dim {head_dim}; supported head dims: {', '.join(map(str, HEAD_DIMS))}")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"q's heads ({heads_q}) must be a multiple of the cache's heads ({heads_kv})")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.numel() and not in_kernel_layout(t):
            raise ValueError(f"{name} must have unit stride along head_dim and 16-byte aligned rows (it is written "
                             "in place, so it cannot be copied)")
    cache_rows = None if cache_batch_idx is None else _check_index("cache_batch_idx", cache_batch_idx, batch,
                                                                   q.device)
    if cache_batch_idx is not None and block_table is not None:
        raise ValueError("cache_batch_idx cannot be combined with block_table (the page table names each "
                         "sequence's pages)")
    if block_table is None:
        if cache_batch_idx is None and k_cache.shape[0] != batch:
            raise ValueError(f"k_cache holds {k_cache.shape[0]} sequences but q has batch {batch}")
        if cache_rows is not None and any(not 0 <= r < k_cache.shape[0] for r in cache_rows):
            raise ValueError(f"cache_batch_idx must lie in [0, {k_cache.shape[0]}) (k_cache's sequences), got "
                             f"{cache_rows}")
        capacity = k_cache.shape[1]
    else:
        if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2:
            raise TypeError("block_table must be an int32 tensor [batch, max_pages_per_sequence]")
        if block_table.shape[0] != batch or block_table.device != q.device:
            raise ValueError(f"block_table must be [batch={batch}, max_pages] on {q.device}, got "
                             f"{tuple(block_table.shape)} on {block_table.device}")
        if block_table.stride(1) != 1 or block_table.stride(0) != block_table.shape[1]:
            raise ValueError("block_table must be contiguous")
        if k_cache.shape[1] % PAGE_MULTIPLE:
            raise ValueError(f"the page size (k_cache.shape[1] = {k_cache.shape[1]}) must be a multiple of "
                             f"{PAGE_MULTIPLE}")
        capacity = block_table.shape[1] * k_cache.shape[1]
    new = 0
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (new keys and values to append) or not at all")
    if k is not None:
        k = check_dims("k", k, 4, "[batch, seqlen_new, heads_kv, head_dim]")
        v = check_dims("v", v, 4, "[batch, seqlen_new, heads_kv, head_dim]")
        for name, t in (("k", k), ("v", v)):
            if t.shape[0] != batch or t.shape[2:] != k_cache.shape[2:] or t.dtype != q.dtype or t.device != q.device:
                raise ValueError(f"{name} must be [batch={batch}, seqlen_new, {heads_kv}, {head_dim}] of {q.dtype} "
                                 f"on {q.device}, got {tuple(t.shape)} of {t.dtype} on {t.device}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        new = k.shape[1]
        if cache_rows is not None and len(set(cache_rows)) < batch:
            raise ValueError(f"cache_batch_idx must not repeat a sequence when new keys are appended, got "
                             f"{cache_rows}")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits must be an int >= 0 (0: chosen from the shape), got {num_splits!r}")
    leftpad = None if cache_leftpad is None else _check_index("cache_leftpad", cache_leftpad, batch, q.device)
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        lengths = [cache_seqlens] * batch
    else:
        lengths = _check_index("cache_seqlens", cache_seqlens, batch, q.device, "an int or an int32 tensor")
        if lengths is None:
            return -1
    for b, n in enumerate(lengths):
        if n < 0 or n + new > capacity:
            raise ValueError(f"cache_seqlens[{b}] = {n} with {new} new keys does not fit the cache's {capacity} "
                             "keys")
        if leftpad is not None and not 0 <= leftpad[b] <= n:
            raise ValueError(f"cache_leftpad[{b}] = {leftpad[b]} must lie in [0, cache_seqlens[{b}] = {n}]")
    return max(lengths, default=0) + new


def _check_gpu(q: torch.Tensor) -> None:
    if q.device.type != "cuda":
        raise ValueError(f"portattn runs on a GPU: q is on {q.device}, move q and the caches to a CUDA/ROCm device")


def attention_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, *,
                           cache_seqlens: Union[int, torch.Tensor], k: Optional[torch.Tensor] = None,
                           v: Optional[torch.Tensor] = None, block_table: Optional[torch.Tensor] = None,
                           causal: bool = True, scale: Optional[float] = None, num_splits: int = 0,
                           return_lse: bool = False, window: Optional[Tuple[int, int]] = None, softcap: float = 0.0,
                           alibi_slopes: Optional[torch.Tensor] = None, cache_batch_idx: Optional[torch.Tensor] = None,
                           cache_leftpad: Optional[torch.Tensor] = None
                           ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Attention of ``q`` ``[B, Nq, Hq, D]`` over each sequence's KV cache, for generation.

    ``k_cache``/``v_cache``: ``[B_cache, capacity, Hk, D]``, or pages ``[num_pages, page_size, Hk, D]`` (page_size a
    multiple of 16) with ``block_table`` int32 ``[B, max_pages]`` naming each sequence's pages in order.
    ``cache_seqlens`` (int, or int32 ``[B]``): where each sequence's keys end in its cache before the call.
    ``k``/``v`` ``[B, Nnew, Hk, D]``, when given, are written into the caches after them (in place) and attended to.
    ``cache_batch_idx`` (int32 ``[B]``, contiguous caches): the cache sequence of each batch row (else row b, and
    ``B_cache = B``); distinct when new keys are appended. ``cache_leftpad`` (int32 ``[B]``): each sequence's keys
    start at that cache row (left padding before it is not attended to).

    Masks are aligned bottom-right: query position i of Nq is aligned with the key ``L - Nq + i`` of a sequence of L
    keys. ``causal`` hides the keys after it; ``window=(left, right)`` keeps the keys from ``left`` before to
    ``right`` after it (-1: unbounded; with ``causal`` right is 0); ``softcap`` and ``alibi_slopes`` (float32
    ``[Hq]`` or ``[B, Hq]``) as in ``portattn.attention``. ``num_splits``: key splits per sequence (0: chosen from
    the shape and the GPU; at most 256 are taken, and no more than the cache has key tiles). Returns ``out``
    ``[B, Nq, Hq, D]`` (and the natural-log LSE ``[B, Hq, Nq]`` with ``return_lse``); a query position that sees no
    key gives zeros (LSE -inf).

    Arguments are checked without a device sync; lengths, index tensors and page indices that live on the GPU are
    checked by the kernels, which return NaN for a sequence whose length does not fit its cache, whose
    ``cache_batch_idx`` or ``cache_leftpad`` is out of range, or whose page table names a page outside the pool
    (never reading or writing outside them).
    """
    key = _signature(q, k_cache, v_cache, cache_seqlens, k, v, block_table, causal, scale, num_splits, return_lse,
                     window, softcap, alibi_slopes, cache_batch_idx, cache_leftpad)
    replay = eager.lookup(key)
    if replay is not None:
        return replay(q, k_cache, v_cache, cache_seqlens, k, v, block_table)
    max_keys = check_arguments(q, k_cache, v_cache, cache_seqlens, k, v, block_table, num_splits, cache_batch_idx,
                               cache_leftpad)
    problem = options_problem(causal, scale, return_lse) or mask_problem(q.transpose(1, 2), k_cache.transpose(1, 2),
                                                             "bottom-right", window, softcap, alibi_slopes, None)
    if problem:
        raise problem.error
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v)):
        raise RuntimeError("attention_with_kvcache is not differentiable (it serves generation); call it under "
                           "torch.no_grad()")
    _check_gpu(q)
    if not isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    cache_seqlens, cache_batch_idx, cache_leftpad = (
        t if t is None or t.device == q.device else t.to(q.device) for t in (cache_seqlens, cache_batch_idx,
                                                                             cache_leftpad))
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    left, right = (-1, -1) if window is None else window
    # Eager calls on plain tensors (not fake or functional ones while tracing): the operator's body, no dispatch.
    args = (q, k_cache, v_cache, cache_seqlens, k, v, block_table, causal, scale, num_splits, return_lse, max_keys,
            int(left), int(right), float(softcap), alibi_slopes, cache_batch_idx, cache_leftpad)
    if type(q) is torch.Tensor and type(k_cache) is torch.Tensor and not torch.compiler.is_compiling():
        out, lse, replay = _launch(*args)
        if key is not None and replay is not None:
            eager.remember(key, replay)
    else:
        out, lse = torch.ops.portattn.attention_with_kvcache(*args)
    return (out, lse) if return_lse else out
