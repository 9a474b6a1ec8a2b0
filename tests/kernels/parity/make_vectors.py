"""Regenerate the golden parity vectors: ``python tests/kernels/parity/make_vectors.py``.

Inputs are multiples of 1/16 in [-4, 4], so float32, float16 and bfloat16 hold them exactly and every dtype is
checked against the same float64 reference outputs (computed here on the CPU). They are stored as float16.
"""
from __future__ import annotations

from pathlib import Path

import torch

from portattn.tools.reference import reference_attention

PATH = Path(__file__).with_name("vectors.pt")

# name, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, causal, scale (None: 1/sqrt(d))
CASES = [
    ("d32-gqa-causal-odd", 1, 4, 2, 37, 37, 32, True, None),
    ("d32-single-query", 2, 2, 2, 1, 129, 32, False, None),
    ("d64-mqa-causal-nq<nk", 1, 4, 1, 65, 200, 64, True, None),
    ("d64-causal-nq>nk", 1, 2, 2, 130, 33, 64, True, 0.3),
    ("d96-odd", 1, 3, 3, 77, 77, 96, False, None),
    ("d96-gqa-causal", 1, 4, 2, 50, 61, 96, True, None),
    ("d128-gqa-causal", 1, 4, 2, 100, 150, 128, True, None),
    ("d128-one-key", 1, 2, 2, 3, 1, 128, False, None),
    ("d256-gqa-causal-odd", 1, 2, 1, 45, 67, 256, True, None),
    ("d256-odd", 1, 1, 1, 33, 97, 256, False, 0.05),
]


def grid_randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * 16).round().clamp(-64, 64) / 16


def make() -> list[dict]:
    gen = torch.Generator().manual_seed(20261122)
    vectors = []
    for name, b, hq, hk, nq, nk, d, causal, scale in CASES:
        q = grid_randn(gen, b, hq, nq, d)
        k = grid_randn(gen, b, hk, nk, d)
        v = grid_randn(gen, b, hk, nk, d)
        out, lse = reference_attention(q, k, v, causal, scale)
        vectors.append(dict(name=name, causal=causal, scale=scale, q=q.half(), k=k.half(), v=v.half(), out=out,
                            lse=lse))
    return vectors


if __name__ == "__main__":
    torch.save(make(), PATH)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes)")
