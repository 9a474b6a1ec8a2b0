"""Host cost of training calls: wall-clock microseconds per call on tiny bfloat16 tensors ([1, 8, 64, 64], causal),
without synchronizing inside the loop, for portattn and SDPA (its default backend), in three rounds: inference
calls, ``out=`` calls, forward calls on inputs that need gradients, and forward + backward steps.

    PYTHONPATH=. python3 scripts/host_cost_training.py
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

import portattn


def host_us(fn, calls: int = 300) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    per_call = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return per_call


def main() -> None:
    q, k, v = (torch.randn(1, 8, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    dout = torch.randn_like(q)

    def step(fwd):
        return lambda: fwd(*leaves).backward(dout)

    portattn_fwd = lambda *t: portattn.attention(*t, causal=True)  # noqa: E731
    sdpa_fwd = lambda *t: F.scaled_dot_product_attention(*t, is_causal=True)  # noqa: E731
    for round_ in range(3):
        figures = {
            "inference portattn": host_us(lambda: portattn.attention(q, k, v, causal=True)),
            "inference portattn out=": host_us(lambda: portattn.attention(q, k, v, causal=True, out=out)),
            "inference SDPA": host_us(lambda: sdpa_fwd(q, k, v)),
            "forward with grad portattn": host_us(lambda: portattn_fwd(*leaves)),
            "forward with grad SDPA": host_us(lambda: sdpa_fwd(*leaves)),
            "forward + backward portattn": host_us(step(portattn_fwd), 100),
            "forward + backward SDPA": host_us(step(sdpa_fwd), 100),
        }
        print(round_, "  ".join(f"{name}: {us:.0f} us" for name, us in figures.items()), flush=True)


if __name__ == "__main__":
    main()
