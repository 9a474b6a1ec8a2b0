"""Hugging Face transformers models on portattn: ``attn_implementation="portattn"``.

Importing this module registers an attention function and its mask function under the name ``"portattn"`` with
transformers (``AttentionInterface`` and ``masking_utils.AttentionMaskInterface``; :func:`register` does it again
harmlessly)::

    import portattn.integrations.transformers
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="portattn", dtype=torch.bfloat16)

The results are those of ``attn_implementation="sdpa"`` (of ``"eager"`` for models with attention logit
softcapping, such as Gemma 2, which transformers' SDPA path ignores), for inference, generation and training:

- Masks are built as for SDPA. Where a mask is exactly causal (aligned bottom-right: the queries are the last keys)
  intersected with a sliding window (``sliding_window`` keys up to and including the query's own, flash-attn's
  ``window=(sliding_window - 1, 0)``) and with padding of the keys, which the mask function checks once per forward,
  portattn gets the causal flag, the window and a ``[batch, 1, 1, keys]`` padding mask, and skips the tiles outside
  the window; any other mask (static caches, packed sequences, bidirectional or custom masks) is passed as it is.
  Without a mask, the call is causal when SDPA's would be (``is_causal`` or ``module.is_causal``, more than one
  query). Grouped-query attention runs without repeating keys and values; ``scaling`` and ``softcap`` are passed on.
  Under ``torch.autocast`` query, key and value are cast as autocast casts SDPA's inputs.
- Calls portattn cannot take run on transformers' SDPA function (on the eager computation when ``softcap`` is set),
  with one warning per reason: tensors not on a GPU (``device``), ``dropout > 0`` (``dropout``, i.e. attention
  dropout while training), a dtype, head dim or GPU without a kernel (``dtype``, ``head_dim``, ``target``,
  ``backward``), a mask that is neither boolean nor of the query's dtype (``attn_mask``), a ``position_bias``
  (``position_bias``), and shapes or arguments SDPA would not take either. Attention sinks (``s_aux``, which
  transformers' SDPA function would drop) raise ``NotImplementedError``.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..kernels.variant import capturing
from ..ops import eager
from ..ops.attention import attention, sdpa_autocast
from ..ops.support import Unsupported, gpu_problem, sdpa_problem
from .sdpa import kernel_reason

NAME = "portattn"

# Masks made by portattn_mask that are causal (bottom-right) & window & key padding:
# mask -> (its version counter then, padding, window).
_structured: WeakIdKeyDictionary = WeakIdKeyDictionary()
_warned: set[str] = set()


def _tracing(t: torch.Tensor) -> bool:
    """Whether ``t``'s values cannot be read now (tracing, compiling, capturing a CUDA graph)."""
    return (torch.jit.is_tracing() or torch.compiler.is_compiling()
            or (t.is_cuda and capturing()))


def _structure(mask: torch.Tensor,
               sliding_window: int | None) -> tuple[torch.Tensor | None, tuple[int, int] | None] | None:
    """``(padding, window)`` when ``mask`` (boolean ``[batch, heads, queries, keys]``) equals a bottom-right causal
    mask, within ``window`` when ``sliding_window`` is set, intersected with the keys of ``padding`` (boolean
    ``[batch, heads, 1, keys]``, None when no key is hidden); else None."""
    queries, keys = mask.shape[-2:]
    rows = torch.arange(queries, device=mask.device).unsqueeze(1) + (keys - queries)
    cols = torch.arange(keys, device=mask.device)
    band = cols <= rows
    if sliding_window is not None:
        band &= cols > rows - sliding_window
    padding = mask.any(dim=-2, keepdim=True)  # exact for every key the band lets some query see
    same, padded = torch.stack(((padding & band).eq(mask).all(), ~padding.all())).tolist()
    if not same:
        return None
    return (padding if padded else None), (None if sliding_window is None else (sliding_window - 1, 0))


def portattn_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """transformers' mask function for ``"portattn"``: SDPA's mask (boolean, True = attend, or None where SDPA relies
    on ``is_causal``), recorded with its causal/window/padding decomposition when it has one."""
    mask = sdpa_mask(*args, **kwargs)
    if mask is not None and mask.dtype == torch.bool and mask.dim() == 4 and not _tracing(mask):
        structure = _structure(mask, kwargs.get("local_size"))
        if structure is not None:
            _structured[mask] = (mask._version, *structure)
    return mask


def _unsupported(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                 dropout: float, scaling: float | None, position_bias: torch.Tensor | None) -> Unsupported | None:
    """Why portattn cannot take this call, or None."""
    if position_bias is not None:
        return Unsupported("position_bias", NotImplementedError("position_bias is not supported"))
    problem = sdpa_problem(query, key, value, attention_mask, dropout, False, scaling, True) or gpu_problem(query)
    if problem:
        return problem
    reason = kernel_reason(query, key, value)
    if reason is not None:
        which = "backward kernel" if reason == "backward" else "kernel"
        return Unsupported(reason, NotImplementedError(
            f"no portattn {which} for this GPU, {query.dtype} and head_dim {query.shape[3]}"))
    return None


def _causal(module: torch.nn.Module, query: torch.Tensor, attention_mask: torch.Tensor | None,
            is_causal: bool | None) -> bool:
    """Whether a call is causal without a mask, as transformers' SDPA function decides it."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    return bool(attention_mask is None and query.shape[2] > 1 and causal)


def _eager_softcap(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float, scaling: float | None, softcap: float,
                   is_causal: bool | None) -> torch.Tensor:
    """Softcapped attention computed as transformers' eager functions do (SDPA has no softcap); ``[B, S, Hq, D]``."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scores = query @ key.transpose(2, 3) * (query.shape[3] ** -0.5 if scaling is None else scaling)
    scores = (softcap * torch.tanh(scores / softcap)).float()  # the softmax runs in float32, as in eager
    if _causal(module, query, attention_mask, is_causal):
        attention_mask = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device).tril()
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, torch.finfo(torch.float32).min)
    elif attention_mask is not None:
        scores = scores + attention_mask
    probs = torch.softmax(scores, dim=-1).to(query.dtype)
    probs = F.dropout(probs, p=dropout, training=module.training)
    return (probs @ value).transpose(1, 2).contiguous()


def portattn_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               attention_mask: torch.Tensor | None, dropout: float = 0.0,
                               scaling: float | None = None, is_causal: bool | None = None,
                               softcap: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention function for ``"portattn"``: query ``[B, Hq, S, D]``, key and value ``[B, Hk, Skv,
    D]`` (with the cache), the mask from :func:`portattn_mask`; returns ``([B, S, Hq, D], None)``. The mask carries
    any sliding window, so ``sliding_window`` (in ``kwargs``) is not needed."""
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError("attention sinks (s_aux) are not supported by portattn; load this model with "
                                  "attn_implementation=\"eager\"")
    query, key, value, _ = sdpa_autocast(query, key, value, None)  # under torch.autocast, as SDPA computes
    causal = _causal(module, query, attention_mask, is_causal)
    # Unmasked calls of a signature portattn took before replay its launches, without the checks.
    if attention_mask is None and not softcap and dropout == 0 and kwargs.get("position_bias") is None:
        _, out = eager.replay(query, key, value, causal, scaling, True)
        if out is not None:
            return out.transpose(1, 2).contiguous(), None
    problem = _unsupported(query, key, value, attention_mask, dropout, scaling, kwargs.get("position_bias"))
    if problem is not None:
        if problem.reason not in _warned:
            _warned.add(problem.reason)
            instead = "the eager computation (SDPA has no softcap)" if softcap else "sdpa_attention_forward"
            warnings.warn(f"portattn cannot take an attention call ({problem.reason}: {problem.error}); it runs on "
                          f"{instead} instead (reported once per reason)", stacklevel=2)
        if softcap:
            return _eager_softcap(module, query, key, value, attention_mask, dropout, scaling, softcap, is_causal), None
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    structure = None if attention_mask is None else _structured.get(attention_mask)
    if (structure is not None and structure[0] == attention_mask._version
            and attention_mask.shape[-2:] == (query.shape[2], key.shape[2])):
        _, padding, window = structure
        out = attention(query, key, value, causal=True, causal_align="bottom-right", window=window, scale=scaling,
                        softcap=softcap or 0.0, attn_mask=padding)
    else:
        out = attention(query, key, value, causal=causal, scale=scaling, softcap=softcap or 0.0,
                        attn_mask=attention_mask)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Register ``"portattn"`` with transformers' attention and mask interfaces (again: no change)."""
    AttentionInterface.register(NAME, portattn_attention_forward)
    AttentionMaskInterface.register(NAME, portattn_mask)


register()
