"""flash-attn 2.x's functions on portattn: ``from portattn.flash_attn import flash_attn_func`` in place of
``from flash_attn import flash_attn_func``.

Same names, arguments, defaults, layouts (``[batch, seq, heads, head_dim]``; packed variable-length batches
``[total_tokens, heads, head_dim]`` with int32 ``cu_seqlens``) and mask semantics (causal and windows aligned
bottom-right, ``window_size=(-1, -1)`` unbounded, ``softcap``, ``alibi_slopes``), in every function including
``flash_attn_with_kvcache``. Variable-length LSE is ``[heads, total_q]``. Arguments portattn does not support
(``dropout_p > 0``, ``return_attn_probs``, ``block_table`` in the variable-length functions) raise
``NotImplementedError`` naming them; none is ignored.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..ops import attention as ops
from ..ops.kvcache import attention_with_kvcache, check_arguments
from ..ops.support import check_dims, qkv_problem

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
]


def _refuse(dropout_p: object, return_attn_probs: object) -> None:
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a number, got {type(dropout_p).__name__}")
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p={dropout_p} is not supported by portattn (only 0.0)")
    if not isinstance(return_attn_probs, bool):
        raise TypeError(f"return_attn_probs must be a bool, got {type(return_attn_probs).__name__}")
    if return_attn_probs:
        raise NotImplementedError("return_attn_probs=True is not supported by portattn (it never forms the "
                                  "attention matrix)")


def _window(causal: object, window_size: object) -> object:
    """portattn's ``window`` for flash-attn's ``window_size`` (None: unbounded), after checking ``causal``."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    window = tuple(window_size) if isinstance(window_size, (tuple, list)) else window_size
    return None if window == (-1, -1) else window


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: Optional[float] = None, causal: bool = False,
                    window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                    return_attn_probs: bool = False) -> torch.Tensor:
    """Attention over q ``[batch, seq_q, heads_q, d]`` and k, v ``[batch, seq_k, heads_kv, d]``; returns
    ``[batch, seq_q, heads_q, d]``. Differentiable."""
    _refuse(dropout_p, return_attn_probs)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dims(name, t, 4, "[batch, seq, heads, head_dim]")
    window = _window(causal, window_size)
    # portattn.attention on the [batch, heads, seq, d] views, which replays a repeated call (ops/eager.py)
    out = ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, scale=softmax_scale,
                        deterministic=deterministic, causal_align="bottom-right", window=window, softcap=softcap,
                        alibi_slopes=alibi_slopes)
    return out.transpose(1, 2)  # type: ignore[union-attr]


def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = 0.0,
                             softmax_scale: Optional[float] = None, causal: bool = False,
                             window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                             return_attn_probs: bool = False) -> torch.Tensor:
    """``flash_attn_func`` with k and v packed: kv ``[batch, seq_k, 2, heads_kv, d]``."""
    _check_packed("kv", kv, 5, 2)
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                              return_attn_probs: bool = False) -> torch.Tensor:
    """``flash_attn_func`` with q, k and v packed: qkv ``[batch, seq, 3, heads, d]``."""
    _check_packed("qkv", qkv, 5, 3)
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           softcap, alibi_slopes, deterministic, return_attn_probs)


def _check_packed(name: str, t: object, dims: int, parts: int) -> None:
    layout = ("[batch, seq, {p}, heads, head_dim]" if dims == 5 else "[total, {p}, heads, head_dim]").format(p=parts)
    if check_dims(name, t, dims, layout).shape[dims - 3] != parts:
        raise ValueError(f"{name} must be {layout}, got shape {tuple(t.shape)}")


def _check_cu_seqlens(name: str, cu: object, q: torch.Tensor, batch: Optional[int]) -> int:
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(cu).__name__}")
    if cu.dtype != torch.int32 or cu.dim() != 1 or cu.shape[0] < 2 or cu.device != q.device or cu.stride(0) != 1:
        raise ValueError(f"{name} must be a contiguous int32 [batch + 1] tensor on {q.device}, got {cu.dtype} "
                         f"{tuple(cu.shape)} on {cu.device}")
    if batch is not None and cu.shape[0] - 1 != batch:
        raise ValueError(f"{name} describes {cu.shape[0] - 1} sequences, cu_seqlens_q {batch}")
    return cu.shape[0] - 1


def _check_max(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{name} must be an int >= 0, got {value!r}")
    return value


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                           return_attn_probs: bool = False,
                           block_table: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Attention over packed sequences: q ``[total_q, heads_q, d]``, k, v ``[total_k, heads_kv, d]``; sequence b has
    rows ``cu_seqlens_q[b] .. cu_seqlens_q[b + 1]`` of q (and likewise of k, v), at most ``max_seqlen_q`` /
    ``max_seqlen_k`` of them. Returns ``[total_q, heads_q, d]``. Differentiable."""
    _refuse(dropout_p, return_attn_probs)
    if block_table is not None:
        raise NotImplementedError("block_table is not supported by portattn's flash_attn_varlen_func (paged KV "
                                  "caches: use flash_attn_with_kvcache)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dims(name, t, 3, "[total_tokens, heads, head_dim]")
    problem = qkv_problem(q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2),
                          v.unsqueeze(0).transpose(1, 2))
    if problem:
        raise problem.error
    batch = _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q, None)
    _check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, q, batch)
    max_q, max_k = _check_max("max_seqlen_q", max_seqlen_q), _check_max("max_seqlen_k", max_seqlen_k)
    if isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.dim() == 2 and alibi_slopes.shape[0] != batch:
        raise ValueError(f"alibi_slopes has {alibi_slopes.shape[0]} rows but there are {batch} sequences")
    masks = ops.mask_args(q, k, causal, "bottom-right", _window(causal, window_size), softcap, alibi_slopes, None,
                          (cu_seqlens_q, cu_seqlens_k, max_q, max_k))
    return ops.call_op(q, k, v, causal, softmax_scale, False, None, deterministic, masks)  # type: ignore[return-value]


def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                    causal: bool = False, window_size: Sequence[int] = (-1, -1),
                                    softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                                    deterministic: bool = False, return_attn_probs: bool = False) -> torch.Tensor:
    """``flash_attn_varlen_func`` with k and v packed: kv ``[total_k, 2, heads_kv, d]``."""
    _check_packed("kv", kv, 4, 2)
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                     causal: bool = False, window_size: Sequence[int] = (-1, -1),
                                     softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                                     deterministic: bool = False, return_attn_probs: bool = False) -> torch.Tensor:
    """``flash_attn_varlen_func`` with q, k and v packed: qkv ``[total, 3, heads, d]``."""
    _check_packed("qkv", qkv, 4, 3)
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
            interleaved: bool) -> torch.Tensor:
    """x ``[batch, seq, heads, d]`` with its first ``2 * cos.shape[1]`` dims rotated at ``positions`` ``[batch,
    seq]`` (GPT-J pairs when ``interleaved``, else GPT-NeoX halves), as flash-attn's rotary embedding."""
    half = cos.shape[1]
    c = cos[positions].unsqueeze(2).to(torch.float32)  # [batch, seq, 1, half]
    s = sin[positions].unsqueeze(2).to(torch.float32)
    rot, rest = x[..., :2 * half].float(), x[..., 2 * half:]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:
        a, b = rot[..., :half], rot[..., half:]
        rot = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    return torch.cat((rot.to(x.dtype), rest), dim=-1)


def _rotate_new(q: torch.Tensor, k: torch.Tensor, cos: object, sin: object, cache_seqlens: torch.Tensor,
                masked: bool, interleaved: object, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q and the new k rotated at their cache positions (flash-attn's rotary embedding for decoding): the new keys
    at ``cache_seqlens + i``; the queries there too when ``masked`` (causal or windowed), else all at
    ``cache_seqlens``. The tables must cover the cache's ``capacity`` positions."""
    if not isinstance(cos, torch.Tensor) or not isinstance(sin, torch.Tensor):
        raise TypeError("rotary_cos and rotary_sin must be torch.Tensors")
    if not isinstance(interleaved, bool):
        raise TypeError(f"rotary_interleaved must be a bool, got {type(interleaved).__name__}")
    if (cos.dim() != 2 or sin.shape != cos.shape or 2 * cos.shape[1] > q.shape[-1] or cos.shape[0] < capacity
            or not cos.is_floating_point() or sin.dtype != cos.dtype):
        raise ValueError("rotary_cos and rotary_sin must be floating [seqlen_ro, rotary_dim / 2] with seqlen_ro >= "
                         f"the cache's {capacity} positions and rotary_dim <= head_dim, got {tuple(cos.shape)} "
                         f"{cos.dtype} and {tuple(sin.shape)} {sin.dtype}")
    for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    start = cache_seqlens.to(q.device, torch.int64).unsqueeze(1)
    # Lengths on the device are checked by the kernels (NaN for a sequence they do not fit): the positions are held
    # inside the tables so that the lookups never read outside them.
    last = cos.shape[0] - 1
    k_pos = (start + torch.arange(k.shape[1], device=q.device)).clamp_(0, last)
    q_pos = start + torch.arange(q.shape[1], device=q.device) if masked else start.expand(-1, q.shape[1])
    q_pos = q_pos.clamp(0, last)
    return _rotate(q, cos, sin, q_pos, interleaved), _rotate(k, cos, sin, k_pos, interleaved)


def flash_attn_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            k: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None,
                            rotary_cos: Optional[torch.Tensor] = None, rotary_sin: Optional[torch.Tensor] = None,
                            cache_seqlens: Optional[object] = None, cache_batch_idx: Optional[torch.Tensor] = None,
                            cache_leftpad: Optional[torch.Tensor] = None, block_table: Optional[torch.Tensor] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True, alibi_slopes: Optional[torch.Tensor] = None,
                            num_splits: int = 0, return_softmax_lse: bool = False):
    """Decoding over a KV cache (``portattn.attention_with_kvcache``) with flash-attn's arguments: new k, v appended
    in place at ``cache_seqlens`` (an int or int32 ``[batch]``; None: the whole cache, every page of a table), the
    cache sequence of each batch row (``cache_batch_idx``), left padding (``cache_leftpad``), paged caches through
    ``block_table``, rotary embedding of q and the new k (``rotary_cos``/``rotary_sin`` ``[seqlen_ro, rotary_dim /
    2]`` covering the cache's positions, applied at them), windows, softcap and ALiBi. Returns ``out`` (and the LSE
    ``[batch, heads_q, seq_q]`` with ``return_softmax_lse``)."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size must be a pair (left, right), got {window_size!r}")
    local = tuple(window_size) != (-1, -1)
    check_dims("q", q, 4, "[batch, seq, heads, head_dim]")
    check_dims("k_cache", k_cache, 4, "[batch, capacity, heads_kv, head_dim] or pages")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    paged = isinstance(block_table, torch.Tensor) and block_table.dim() == 2
    capacity = k_cache.shape[1] * (block_table.shape[1] if paged else 1)
    if cache_seqlens is None:
        cache_seqlens = capacity
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        # as a tensor on q's device, so that calls of one signature replay (ops/eager.py)
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin must be given together")
    if rotary_cos is not None:
        if k is None:
            raise ValueError("rotary_cos / rotary_sin need the new k and v (rotary embedding applies to new keys)")
        # The arguments are checked before the rotation, which indexes the tables with them.
        check_arguments(q, k_cache, v_cache, cache_seqlens, k, v, block_table, num_splits, cache_batch_idx,
                        cache_leftpad)
        q, k = _rotate_new(q, k, rotary_cos, rotary_sin, cache_seqlens, causal or local, rotary_interleaved,
                           capacity)
    return attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, k=k, v=v,
                                  block_table=block_table, causal=causal, scale=softmax_scale,
                                  num_splits=num_splits, return_lse=return_softmax_lse,
                                  window=tuple(window_size) if local else None, softcap=softcap,
                                  alibi_slopes=alibi_slopes, cache_batch_idx=cache_batch_idx,
                                  cache_leftpad=cache_leftpad)
