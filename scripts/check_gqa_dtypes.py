"""One grouped-query prefill cell (32 query heads on 8 key/value heads, B = 32, N = 1024, d = 128, causal) timed in
float16, bfloat16 and float16 holding bfloat16 values (the same numbers with fewer mantissa bits set), for portattn and
SDPA's cuDNN backend on the same inputs: CUDA events, median of 30 calls after 5 warm-ups; the dtypes in two orders.

    PYTHONPATH=. python3 scripts/check_gqa_dtypes.py
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import portattn
from portattn.tools.bench import time_ms

B, HQ, HK, N, D = 32, 32, 8, 1024, 128
KINDS = {"float16": lambda t: t.half(), "bfloat16": lambda t: t.bfloat16(),
         "float16 (bfloat16 values)": lambda t: t.bfloat16().half()}


def inputs(kind: str) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    return [KINDS[kind](torch.randn(B, h, N, D, device="cuda", generator=gen)) for h in (HQ, HK, HK)]


def main() -> None:
    flops = 4 * B * HQ * N * N * D / 2  # causal
    for order in (list(KINDS), list(KINDS)[::-1]):
        for kind in order:
            q, k, v = inputs(kind)
            ours = time_ms(lambda: portattn.attention(q, k, v, causal=True), reps=30, warmup=5)
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
                cudnn = time_ms(sdpa, reps=30, warmup=5)
            print(f"{kind:26s} portattn {flops / ours / 1e9:6.1f} TF/s  cudnn {flops / cudnn / 1e9:6.1f} TF/s  "
                  f"x cudnn {cudnn / ours:.3f}")


if __name__ == "__main__":
    main()
