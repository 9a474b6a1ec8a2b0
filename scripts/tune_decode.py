"""Time the decode kernel for candidate tiles and split rules against SDPA's default backend (one process, same
inputs, CUDA graph replay, median).

    PYTHONPATH=. python3 scripts/tune_decode.py
Each candidate replaces the sm90 bfloat16 d = 128 row of the narrow decode table, the automatic split target
(rounds of resident blocks), the shortest split (key tiles) and the most splits. A line per candidate: each shape's
time and its ratio to SDPA's default (higher is better), then the geometric mean of the ratios.
"""
from __future__ import annotations

import itertools
import math

import torch

import portattn
from portattn.kernels import decode
from portattn.kernels.variant import TileConfig as T
from portattn.ops import eager
from portattn.runtime.compiler import compile_kernel
from portattn.runtime.target import target_for
from portattn.tools.bench import _graph_us

TILES = [
    T(block_m=16, block_n=32, threads=32, stages=3),
    T(block_m=16, block_n=32, threads=64, stages=3, key_waves=2),
    T(block_m=16, block_n=32, threads=64, stages=4, key_waves=2),
    T(block_m=16, block_n=64, threads=64, stages=2, key_waves=2),
    T(block_m=16, block_n=64, threads=128, stages=2, key_waves=4),
    T(block_m=16, block_n=64, threads=128, stages=3, key_waves=4),
]
ROUNDS = [2]
MIN_SPLIT_TILES = [2]
MAX_SPLITS = [256]
# (Hq, Hk, batch, keys, paged)
SHAPES = [(32, 8, 1, 4096, False), (32, 8, 1, 65536, False), (32, 8, 8, 8192, False), (32, 8, 8, 65536, False),
          (32, 8, 32, 4096, False), (8, 1, 1, 4096, False), (8, 1, 1, 65536, False), (8, 1, 8, 8192, False),
          (8, 1, 32, 8192, False), (32, 8, 8, 65536, True), (8, 1, 1, 65536, True)]
PAGE = 64


def cases() -> list[tuple[str, object, float, float]]:
    """(name, portattn call, SDPA default µs, bytes of K and V) per shape."""
    out = []
    for hq, hk, b, n, paged in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(n + b)
        q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, n, hk, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn_like(k)
        lengths = torch.full((b,), n, dtype=torch.int32, device="cuda")
        sdpa = _graph_us(lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True), 50)
        if paged:
            pages = n // PAGE
            table = torch.randperm(b * pages, device="cuda", generator=gen).to(torch.int32).view(b, pages)
            k_pool = torch.empty(b * pages, PAGE, hk, 128, device="cuda", dtype=torch.bfloat16)
            v_pool = torch.empty_like(k_pool)
            k_pool[table.flatten().long()] = k.reshape(b * pages, PAGE, hk, 128)
            v_pool[table.flatten().long()] = v.reshape(b * pages, PAGE, hk, 128)
            call = lambda q=q, kp=k_pool, vp=v_pool, t=table, s=lengths: portattn.attention_with_kvcache(  # noqa: E731
                q, kp, vp, cache_seqlens=s, block_table=t)
        else:
            call = lambda q=q, k=k, v=v, s=lengths: portattn.attention_with_kvcache(q, k, v, cache_seqlens=s)  # noqa
        name = f"{hq}:{hk} B={b} N={n}{' paged' if paged else ''}"
        out.append((name, call, sdpa, 2 * k.numel() * 2))
    return out


def main() -> None:
    target = target_for(torch.device("cuda"))
    shapes = cases()
    print("SDPA default: " + " | ".join(f"{name}: {us:.1f} us" for name, _, us, _ in shapes), flush=True)
    for tile, rounds, min_tiles, max_splits in itertools.product(TILES, ROUNDS, MIN_SPLIT_TILES, MAX_SPLITS):
        key = ("bfloat16", 128)
        decode.DECODE_TILES["sm90"] = ({**decode.DECODE_TILES["sm90"][0], key: tile}, decode.DECODE_TILES["sm90"][1])
        decode.SPLIT_ROUNDS = rounds
        decode.MIN_SPLIT_TILES = min_tiles
        decode.MAX_SPLITS = max_splits
        decode._plans.clear()
        eager._replays.clear()  # replays keep the launches of the tables they were made with
        spec = decode.select(target, "bfloat16", 128, 4).attend
        res = compile_kernel(spec, target).resources
        cells, ratios = [], []
        for name, call, sdpa, nbytes in shapes:
            us = _graph_us(call, 30)
            ratios.append(sdpa / us)
            cells.append(f"{name}: {us:.1f} us {nbytes / us / 1e3:.0f} GB/s x{sdpa / us:.2f}")
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        head = (f"{spec.label} rounds={rounds} min_tiles={min_tiles} max_splits={max_splits} "
                f"regs {res.registers} spill {res.spill_bytes} geomean x{mean:.3f}")
        print(head + " | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
