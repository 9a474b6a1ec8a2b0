"""Time the decode kernel for candidate tiles and split rules against SDPA's default backend (one process, same
inputs, CUDA graphs of back-to-back calls on copies of the inputs, median).

    PYTHONPATH=. python3 scripts/tune_decode.py
Each candidate replaces the sm90 bfloat16 d = 128 row of the narrow decode table and the automatic split rule's
constants: the most rounds of resident blocks, the shortest split (key tiles), the most splits, the bytes in flight
that calls aim for. A line per candidate: each shape's time and its ratio to SDPA's default (higher is better), then the
geometric mean of the ratios.
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
from portattn.tools.bench import cycled, decode_input_sets, graph_us, kv_bytes

TILES = [
    T(block_m=16, block_n=32, threads=32, stages=3),
    T(block_m=16, block_n=32, threads=64, stages=3, key_waves=2),
]
ROUNDS = [2]
MIN_SPLIT_TILES = [2]
MAX_SPLITS = [256]
BYTES_IN_FLIGHT = [2 << 20, 4 << 20, 8 << 20]
# (Hq, Hk, batch, keys, paged)
SHAPES = [(32, 8, 1, 4096, False), (32, 8, 1, 65536, False), (32, 8, 8, 8192, False), (32, 8, 8, 65536, False),
          (32, 8, 32, 4096, False), (8, 1, 1, 4096, False), (8, 1, 1, 65536, False), (8, 1, 8, 8192, False),
          (8, 1, 32, 8192, False), (32, 8, 8, 65536, True), (8, 1, 1, 65536, True)]
PAGE = 64


def cases() -> list[tuple[str, list, float, float]]:
    """(name, portattn calls on copies of the inputs, SDPA default µs, bytes of K and V) per shape."""
    out = []
    for hq, hk, b, n, paged in SHAPES:
        nbytes = kv_bytes(torch.bfloat16, 128, hk, b, n)
        sets = decode_input_sets(torch.bfloat16, 128, hq, hk, b, n, PAGE)
        sdpa = graph_us(cycled(sets, lambda s: torch.nn.functional.scaled_dot_product_attention(
            s["q"].transpose(1, 2), s["k"].transpose(1, 2), s["v"].transpose(1, 2), enable_gqa=True)), 50)
        if paged:
            calls = cycled(sets, lambda s: portattn.attention_with_kvcache(
                s["q"], s["k_pool"], s["v_pool"], cache_seqlens=s["lengths"], block_table=s["table"]))
        else:
            calls = cycled(sets, lambda s: portattn.attention_with_kvcache(s["q"], s["k"], s["v"],
                                                                           cache_seqlens=s["lengths"]))
        name = f"{hq}:{hk} B={b} N={n}{' paged' if paged else ''}"
        out.append((name, calls, sdpa, nbytes))
    return out


def main() -> None:
    target = target_for(torch.device("cuda"))
    shapes = cases()
    print("SDPA default: " + " | ".join(f"{name}: {us:.1f} us" for name, _, us, _ in shapes), flush=True)
    for tile, rounds, min_tiles, max_splits, in_flight in itertools.product(
            TILES, ROUNDS, MIN_SPLIT_TILES, MAX_SPLITS, BYTES_IN_FLIGHT):
        key = ("bfloat16", 128)
        decode.DECODE_TILES["sm90"] = ({**decode.DECODE_TILES["sm90"][0], key: tile}, decode.DECODE_TILES["sm90"][1])
        decode.SPLIT_ROUNDS = rounds
        decode.MIN_SPLIT_TILES = min_tiles
        decode.MAX_SPLITS = max_splits
        decode.BYTES_IN_FLIGHT = in_flight
        decode.forget_plans()
        eager.forget()  # replays keep the launches of the tables they were made with
        spec = decode.select(target, "bfloat16", 128, 4).attend
        res = compile_kernel(spec, target).resources
        cells, ratios = [], []
        for name, calls, sdpa, nbytes in shapes:
            us = graph_us(calls, 30)
            ratios.append(sdpa / us)
            cells.append(f"{name}: {us:.1f} us {nbytes / us / 1e3:.0f} GB/s x{sdpa / us:.2f}")
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        head = (f"{spec.label} rounds={rounds} min_tiles={min_tiles} max_splits={max_splits} "
                f"in_flight={in_flight >> 20}MiB "
                f"regs {res.registers} spill {res.spill_bytes} geomean x{mean:.3f}")
        print(head + " | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
