"""What a call hides or changes beyond the plain softmax, as every kernel family takes it (``pa_mask.cuh``).

Query row i is aligned with key i + offset (offset 0: upper-left, SDPA's causal; offset = keys - queries:
bottom-right, flash-attn's) and sees the keys in [i + offset - left, i + offset + right]; ``NONE`` leaves a side
unbounded. Score modifiers (softcap, ALiBi slopes, an attention mask tensor) change the logits. Variable-length
batches give each sequence's first row in packed tensors (``cu_seqlens``). Everything beyond a causal or no mask
needs the kernels compiled with ``PA_MASK_EXT`` (``Masking.extended``), the score modifiers also ``PA_SCORE_MOD``
(``Masking.modified``; the Hopper kernels that run at the register limit have builds without them).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Optional

import torch

NONE = 1 << 30  # PA_MASK_NONE: no bound on that side of the window
# PaScoreMod::mask_kind of each attention-mask dtype.
MASK_KINDS = {torch.bool: 1, torch.float32: 2, torch.float16: 3, torch.bfloat16: 4}


def _shape_key(t: Optional[torch.Tensor]) -> tuple:
    return () if t is None else (t.dtype, t.shape, t.stride())


@dataclass(frozen=True, eq=False)
class Masking:
    """The mask and score options of one call. ``key`` is its launch signature (no data pointers)."""

    left: int = NONE
    right: int = NONE
    bottom_right: bool = False
    softcap: float = 0.0
    alibi: Optional[torch.Tensor] = None  # float32 [heads_q] or [batch, heads_q]
    mask: Optional[torch.Tensor] = None  # [batch | 1, heads_q | 1, seq_q, seq_k], unit stride along keys
    cu_seqlens_q: Optional[torch.Tensor] = None  # int32 [batch + 1] (packed variable-length sequences)
    cu_seqlens_k: Optional[torch.Tensor] = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    key: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        varlen = () if self.cu_seqlens_q is None else (self.cu_seqlens_q.shape[0], self.max_seqlen_q,
                                                        self.max_seqlen_k)
        object.__setattr__(self, "key", (self.left, self.right, self.bottom_right, self.softcap > 0,
                                         _shape_key(self.alibi), _shape_key(self.mask), varlen))

    @property
    def extended(self) -> bool:
        """Whether the kernels need PA_MASK_EXT for this call."""
        return self.left != NONE or self.varlen or self.modified

    @property
    def modified(self) -> bool:
        """Whether a score modifier changes the logits (softcap, ALiBi slopes, a mask tensor: PA_SCORE_MOD)."""
        return self.softcap > 0 or self.alibi is not None or self.mask is not None

    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None

    def lengths(self, q: torch.Tensor, k: torch.Tensor) -> tuple[int, int, int]:
        """(batch, seqlen_q, seqlen_k) of a call on the kernels' [batch, heads, seq, d] views: the sequences'
        count and longest lengths for packed sequences."""
        if self.cu_seqlens_q is not None:
            return self.cu_seqlens_q.shape[0] - 1, self.max_seqlen_q, self.max_seqlen_k
        return q.shape[0], q.shape[2], k.shape[2]

    @property
    def causal(self) -> bool:
        """Whether no row sees a key past its diagonal."""
        return self.right == 0


PLAIN = Masking()
CAUSAL = Masking(right=0)


def window_bounds(causal: bool, window: tuple[int, int]) -> tuple[int, int]:
    """(left, right) of the kernels from flash-attn's ``causal`` and ``window_size`` (-1: unbounded)."""
    left, right = window
    left = NONE if left < 0 else min(left, NONE - 1)
    right = NONE if right < 0 else min(right, NONE - 1)
    return left, 0 if causal else right


def _ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def call_fields(masking: Masking) -> dict[str, object]:
    """The members of ``masking`` that change from call to call of one signature: the tensors' addresses and the
    softcap (the same names in every family's parameter struct)."""
    return {"softcap": masking.softcap, "cu_seqlens_q": _ptr(masking.cu_seqlens_q),
            "cu_seqlens_k": _ptr(masking.cu_seqlens_k), "alibi_slopes": _ptr(masking.alibi),
            "mask": _ptr(masking.mask)}


def set_mask_fields(params: ctypes.Structure, masking: Masking) -> None:
    """Set the members every family's parameter struct shares for ``masking``: the window, alignment, the
    per-call fields (``call_fields``) and the tensors' layouts (alibi_sb, mask_kind, mask_sb / _sh / _sn)."""
    params.bottom_right, params.window_left, params.window_right = int(masking.bottom_right), masking.left, \
        masking.right
    for name, value in call_fields(masking).items():
        setattr(params, name, value)
    if masking.alibi is not None:
        params.alibi_sb = masking.alibi.stride(0) if masking.alibi.dim() == 2 else 0
    if masking.mask is not None:
        m = masking.mask
        params.mask_kind = MASK_KINDS[m.dtype]
        params.mask_sb, params.mask_sh, params.mask_sn = (0 if m.shape[i] == 1 else m.stride(i) for i in range(3))
