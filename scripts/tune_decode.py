"""Time the decode kernel for candidate tiles and split counts (one process, same inputs, CUDA graph replay, median).

    PYTHONPATH=. python3 scripts/tune_decode.py
Each candidate replaces the sm90 bfloat16 d = 128 row of the narrow decode table, the automatic split target and the
split limit.
"""
from __future__ import annotations

import itertools

import torch

import portattn
from portattn.kernels import decode
from portattn.kernels.variant import TileConfig as T
from portattn.runtime.compiler import compile_kernel
from portattn.runtime.target import target_for
from portattn.tools.bench import _graph_us

TILES = [
    T(block_m=16, block_n=32, threads=32, stages=3),
    T(block_m=16, block_n=64, threads=32, stages=2),
]
BLOCKS_PER_SM = [4, 8, 16]
MAX_SPLITS = [128, 256]
SHAPES = [(32, 8, 1, 4096), (32, 8, 1, 65536), (8, 1, 1, 4096), (8, 1, 1, 65536), (32, 8, 8, 65536),
          (32, 8, 32, 4096), (8, 1, 8, 4096)]


def main() -> None:
    target = target_for(torch.device("cuda"))
    cases = []
    for hq, hk, b, n in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(n + b)
        q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, n, hk, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn_like(k)
        cases.append((f"{hq}:{hk} B={b} N={n}", q, k, v, torch.full((b,), n, dtype=torch.int32, device="cuda"),
                      2 * k.numel() * 2))
    for tile, per_sm, max_splits in itertools.product(TILES, BLOCKS_PER_SM, MAX_SPLITS):
        key = ("bfloat16", 128)
        decode.DECODE_TILES["sm90"] = ({**decode.DECODE_TILES["sm90"][0], key: tile}, decode.DECODE_TILES["sm90"][1])
        decode.SPLIT_BLOCKS_PER_SM = per_sm
        decode.MAX_SPLITS = max_splits
        decode._plans.clear()
        spec = decode.select(target, "bfloat16", 128, 4).attend
        res = compile_kernel(spec, target).resources
        cells = []
        for name, q, k, v, lengths, nbytes in cases:
            us = _graph_us(lambda: portattn.attention_with_kvcache(q, k, v, cache_seqlens=lengths), 30)
            cells.append(f"{name}: {us:.1f} us {nbytes / us / 1e3:.0f} GB/s")
        head = f"{spec.label} per_sm={per_sm} max_splits={max_splits} regs {res.registers} spill {res.spill_bytes}"
        print(head + " | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
