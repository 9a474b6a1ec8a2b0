"""Time the decode combine's layouts against SDPA's default backend (one process, same inputs, CUDA graphs of
back-to-back calls on copies of the inputs, median of three interleaved rounds).

    PYTHONPATH=. python3 scripts/tune_decode_combine.py
Each candidate sets the combine's constants (lanes per slot, and the layouts: most splits, threads per block,
splits per slot); the calls take the automatic split count. A line per shape: each candidate's time and its ratio to
SDPA's default (higher is better); then each candidate's geometric mean.
"""
from __future__ import annotations

import math

import torch

import portattn
from portattn.kernels import decode
from portattn.ops import eager
from portattn.tools.bench import cycled, decode_input_sets, graph_us

# name: (COMBINE_ROW_LANES, COMBINE_LAYOUTS); "a/b" is threads per block / splits per slot, "> n" the split counts
# that take the second layout
CANDIDATES = {
    "256/2, 512/4 > 64": (16, ((64, 256, 2), (256, 512, 4))),
    "256/2, 512/4 > 32": (16, ((32, 256, 2), (256, 512, 4))),
    "256/2, 512/4 > 128": (16, ((128, 256, 2), (256, 512, 4))),
    "256/2, 512/2 > 64": (16, ((64, 256, 2), (256, 512, 2))),
    "256/2": (16, ((256, 256, 2),)), "512/4": (16, ((256, 512, 4),)), "128/2": (16, ((256, 128, 2),)),
}
# (head dim, Hq, Hk, batch, keys)
SHAPES = [(128, 8, 1, 8, 65536), (128, 8, 1, 8, 4096), (128, 8, 1, 32, 8192), (128, 8, 1, 32, 65536),
          (128, 32, 8, 8, 8192), (128, 8, 1, 1, 4096), (128, 32, 8, 1, 65536), (128, 32, 8, 1, 4096),
          (64, 8, 1, 8, 65536), (64, 8, 1, 32, 4096), (64, 32, 8, 1, 65536), (64, 8, 1, 1, 4096),
          (64, 8, 1, 1, 8192), (64, 8, 1, 1, 65536), (128, 8, 1, 1, 8192), (128, 8, 1, 1, 65536)]


def use(constants: tuple[int, tuple[tuple[int, int, int], ...]]) -> None:
    decode.COMBINE_ROW_LANES, decode.COMBINE_LAYOUTS = constants
    decode.forget_plans()
    eager.forget()  # replays keep the launches they were made with


def main() -> None:
    ratios: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    for d, hq, hk, b, n in SHAPES:
        sets = decode_input_sets(torch.bfloat16, d, hq, hk, b, n, 64)
        sdpa = cycled(sets, lambda s: torch.nn.functional.scaled_dot_product_attention(
            s["q"].transpose(1, 2), s["k"].transpose(1, 2), s["v"].transpose(1, 2), enable_gqa=True))
        ours = cycled(sets, lambda s: portattn.attention_with_kvcache(s["q"], s["k"], s["v"],
                                                                      cache_seqlens=s["lengths"]))
        times: dict[str, list[float]] = {"sdpa": []} | {name: [] for name in CANDIDATES}
        for _ in range(3):
            times["sdpa"].append(graph_us(sdpa, 30))
            for name, constants in CANDIDATES.items():
                use(constants)
                times[name].append(graph_us(ours, 30))
        med = {name: sorted(t)[1] for name, t in times.items()}
        for name in CANDIDATES:
            ratios[name].append(med["sdpa"] / med[name])
        print(f"d={d} {hq}:{hk} B={b} N={n}: SDPA {med['sdpa']:.2f} us | " + " ".join(
            f"{name} {med[name]:.2f} x{med['sdpa'] / med[name]:.3f}" for name in CANDIDATES), flush=True)
    for name, r in ratios.items():
        print(f"{name}: geomean x{math.exp(sum(map(math.log, r)) / len(r)):.3f}")


if __name__ == "__main__":
    main()
