"""Spreading decode splits of one key tile against two (``decode.SPREAD_TILES``), on calls that spread their keys
over the multiprocessors: one sequence or a few, 8 query heads on one key/value head, bfloat16, d = 128 and 96, with
1 query row (the 16-row tiles) and with 4 and 8 (the 64-row tiles, as in speculative decoding). Both split counts in
one process on the same inputs, CUDA graphs of back-to-back calls on copies of the inputs (``bench.graph_us``), in
the order one, two, two, one; prints a Markdown row per call whose counts differ.

    PYTHONPATH=. python3 scripts/ab_decode_spread.py
"""
from __future__ import annotations

import torch

from portattn.kernels import decode
from portattn.ops import eager
from portattn.ops.kvcache import attention_with_kvcache
from portattn.tools.bench import cycled, decode_inputs, graph_us, input_copies, kv_bytes

HEADS_Q, HEADS_KV = 8, 1
CELLS = [(1, 1, 4096), (8, 1, 4096), (8, 1, 8192), (8, 2, 2048), (8, 2, 4096), (8, 4, 1024), (4, 1, 4096),
         (4, 2, 2048)]  # (query rows, sequences, keys)


def split_counts(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> tuple[int, int]:
    """The automatic split count of the call with one-tile and with two-tile spreading splits."""
    asked = []
    real = decode.splits
    decode.splits = lambda *args: asked.append(args[:6]) or real(*args)
    try:
        decode.forget_plans()  # plan afresh (no replay), so that the split count is asked for
        eager.forget()
        attention_with_kvcache(q, k, v, cache_seqlens=lengths)
    finally:
        decode.splits = real
    return real(*asked[0], 1), real(*asked[0], 2)


def main() -> None:
    print("| d | query rows | B | keys | one-tile splits | two-tile splits | two / one speed |")
    print("|---|---|---|---|---|---|---|")
    for d in (128, 96):
        for rows, batch, keys in CELLS:
            copies = input_copies(kv_bytes(torch.bfloat16, d, HEADS_KV, batch, keys))
            sets = []
            for i in range(copies):
                s = decode_inputs(torch.bfloat16, d, HEADS_Q, HEADS_KV, batch, keys, 64, keys + i)
                s["q"] = torch.randn(batch, rows, HEADS_Q, d, device="cuda", dtype=torch.bfloat16)
                sets.append(s)
            with torch.no_grad():
                one, two = split_counts(sets[0]["q"], sets[0]["k"], sets[0]["v"], sets[0]["lengths"])
                if one == two:
                    continue

                def timed(n: int) -> float:
                    return graph_us(cycled(sets, lambda s: attention_with_kvcache(
                        s["q"], s["k"], s["v"], cache_seqlens=s["lengths"], num_splits=n)), 50)
                t = [timed(one), timed(two), timed(two), timed(one)]
            print(f"| {d} | {rows} | {batch} | {keys} | {one}: {t[0]:.2f} / {t[3]:.2f} | {two}: {t[1]:.2f} / "
                  f"{t[2]:.2f} | {(t[0] + t[3]) / (t[1] + t[2]):.3f}× |", flush=True)


if __name__ == "__main__":
    main()
