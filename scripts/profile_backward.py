"""Kernel times of one backward, portattn's and SDPA's default backend's, on the same inputs (torch profiler, mean of
five backward passes after three warm-up steps). bf16, d = 128, 16 heads, B·N = 32k tokens, causal and not.

    PYTHONPATH=. python3 scripts/profile_backward.py
Prints each side's total and its kernels, longest first.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import portattn

RUNS = 5


def kernel_times(fn: Callable[[], torch.Tensor], grad: torch.Tensor,
                 inputs: tuple[torch.Tensor, ...]) -> dict[str, float]:
    """Mean GPU time per backward of each kernel that ``fn``'s backward runs, in µs."""
    for _ in range(3):
        fn().backward(grad)
    out = fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(RUNS):
            for t in inputs:
                t.grad = None
            out.backward(grad, retain_graph=True)
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name[:70]] = times.get(e.name[:70], 0.0) + e.device_time_total / RUNS
    return times


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n, b in ((2048, 16), (8192, 4)):
        for causal in (False, True):
            q, k, v = (torch.randn(b, 16, n, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                       .requires_grad_() for _ in range(3))
            grad = torch.randn(b, 16, n, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
            for name, fn in (("portattn", lambda: portattn.attention(q, k, v, causal=causal)),
                             ("SDPA default", lambda: torch.nn.functional.scaled_dot_product_attention(
                                 q, k, v, is_causal=causal))):
                times = kernel_times(fn, grad, (q, k, v))
                print(f"{name}, N = {n}, B = {b}, causal {causal}: {sum(times.values()):.0f} us")
                for kernel, us in sorted(times.items(), key=lambda kv: -kv[1]):
                    print(f"  {us:9.1f} us  {kernel}")


if __name__ == "__main__":
    main()
