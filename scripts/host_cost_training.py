"""Host cost of training calls: wall-clock microseconds per call on tiny bfloat16 tensors ([1, 8, 64, 64], causal),
without synchronizing inside the loop, for portattn and SDPA (its default backend): inference calls, ``out=``
calls, forward calls on inputs that need gradients, the backward alone (of a kept graph) and forward + backward
steps. Seven rounds run the timers in turn (the host's speed drifts); a figure is a timer's best round.

    PYTHONPATH=. python3 scripts/host_cost_training.py
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

import portattn
from portattn.tools.bench import best_rounds


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
    calls = {
        "portattn": lambda *t: portattn.attention(*t, causal=True),
        "SDPA": lambda *t: F.scaled_dot_product_attention(*t, is_causal=True),
    }
    kept = {name: fwd(*leaves) for name, fwd in calls.items()}  # graphs for the backward alone
    timers = {"inference portattn out=": lambda: host_us(lambda: portattn.attention(q, k, v, causal=True, out=out))}
    for name, fwd in calls.items():
        timers[f"inference {name}"] = lambda fwd=fwd: host_us(lambda: fwd(q, k, v))
        timers[f"forward with grad {name}"] = lambda fwd=fwd: host_us(lambda: fwd(*leaves))
        timers[f"backward alone {name}"] = lambda name=name: host_us(
            lambda: torch.autograd.grad(kept[name], leaves, dout, retain_graph=True))
        timers[f"forward + backward {name}"] = lambda fwd=fwd: host_us(lambda: fwd(*leaves).backward(dout), 100)
    best = best_rounds(timers, 7)
    print("| call | SDPA µs | portattn µs | portattn / SDPA |\n|---|---|---|---|")
    for call in ("inference", "forward with grad", "backward alone", "forward + backward"):
        ours, theirs = best[f"{call} portattn"], best[f"{call} SDPA"]
        print(f"| {call} | {theirs:.0f} | {ours:.0f} | {ours / theirs:.2f} |")
    print(f"| inference, out= | | {best['inference portattn out=']:.0f} | |")


if __name__ == "__main__":
    main()
