"""Host cost of decode calls over a cache that grows by one key per generated token (transformers' dynamic cache:
a new [batch, heads_kv, keys, head_dim] tensor each step), as a 12-layer model makes them: per step, one call with a
new key length, then 11 with the same one. Wall-clock microseconds per call without synchronizing inside a step,
for SDPA (its default backend, ``enable_gqa=True``) and for portattn's SDPA route (what ``patch_sdpa`` calls); bf16,
one sequence, 16 query heads on 4 key/value heads, d = 128, 700 keys and more. Three rounds of 30 steps run the two
in turn (the host's speed drifts); a figure is the median step of its round.

    PYTHONPATH=. python3 scripts/host_cost_growing_cache.py
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from portattn import scaled_dot_product_attention

LAYERS, STEPS, ROUNDS, FIRST_KEYS = 12, 30, 3, 700


def round_us(fn, q: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """Median microseconds of a step's call with a new key length, and of its repeated calls."""
    new, repeated = [], []
    for k, v in caches:
        start = time.perf_counter()
        fn(q, k, v, enable_gqa=True)
        first = time.perf_counter()
        for _ in range(LAYERS - 1):
            fn(q, k, v, enable_gqa=True)
        new.append(first - start)
        repeated.append((time.perf_counter() - first) / (LAYERS - 1))
        torch.cuda.synchronize()
    return sorted(new)[len(new) // 2] * 1e6, sorted(repeated)[len(repeated) // 2] * 1e6


def main() -> None:
    torch.manual_seed(0)
    q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    caches = [tuple(torch.randn(1, 4, FIRST_KEYS + i, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
              for i in range((ROUNDS + 1) * STEPS)]
    timers = {"SDPA": F.scaled_dot_product_attention, "portattn": scaled_dot_product_attention}
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| round | call | new key length µs | repeated µs | one step of 12 layers µs |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for fn in timers.values():
            round_us(fn, q, caches[:STEPS])  # warm-up: the first calls plan their kernels
        for r in range(ROUNDS):
            for name, fn in timers.items():
                new, repeated = round_us(fn, q, caches[(r + 1) * STEPS:(r + 2) * STEPS])
                print(f"| {r} | {name} | {new:.1f} | {repeated:.1f} | {new + (LAYERS - 1) * repeated:.1f} |")


if __name__ == "__main__":
    main()
