"""Time the backward for candidate dK/dV tiles (one process, same inputs, CUDA events, median).

    PYTHONPATH=. python3 scripts/tune_backward.py
Each candidate replaces the sm90 row of DKDV_TILES for (dtype, head dim); its registers and spills are printed
with the time, so that a faster tile that spills is not mistaken for a good one.
"""
from __future__ import annotations

import torch

import portattn
from portattn.kernels import backward
from portattn.kernels.variant import TileConfig as T
from portattn.runtime.compiler import compile_kernel
from portattn.runtime.target import target_for
from portattn.tools.bench import time_ms

CANDIDATES = {
    ("bfloat16", 128): [
        T(block_m=64, block_n=128, threads=256, stages=2, warpgroup_mma=True),
        T(block_m=32, block_n=128, threads=256, stages=2),
    ],
    ("bfloat16", 64): [
        T(block_m=64, block_n=128, threads=256, stages=2, warpgroup_mma=True),
        T(block_m=64, block_n=64, threads=128, stages=2, warpgroup_mma=True, min_blocks=2),
        T(block_m=64, block_n=64, threads=128, stages=1, warpgroup_mma=True, min_blocks=2),
        T(block_m=64, block_n=128, threads=256, stages=2),
    ],
}
SHAPES = [(4, 16, 8192, False), (16, 16, 2048, True)]


def main() -> None:
    target = target_for(torch.device("cuda"))
    for (dtype, d), tiles in CANDIDATES.items():
        for b, h, n, causal in SHAPES:
            gen = torch.Generator(device="cuda").manual_seed(n + d)
            leaves = [torch.randn(b, h, n, d, device="cuda", dtype=getattr(torch, dtype), generator=gen)
                      .requires_grad_() for _ in range(3)]
            dout = torch.randn_like(leaves[0])
            flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
            for tile in tiles:
                backward.DKDV_TILES["sm90"][(dtype, d)] = tile
                backward._launches.clear()  # the launches kept per call signature hold the previous tile
                spec = backward.select(target, dtype, d).dkdv
                res = compile_kernel(spec, target).resources
                out = portattn.attention(*leaves, causal=causal)
                ms = time_ms(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True), 10, 2)
                print(f"{dtype} d={d} N={n} causal={causal} {spec.label}: regs {res.registers} spill "
                      f"{res.spill_bytes} smem {spec.smem_bytes} -> {ms:.3f} ms, {flops / ms / 1e9:.1f} TF/s",
                      flush=True)


if __name__ == "__main__":
    main()
