"""Backward alone of two (or more) source trees, each in processes of its own, in the order given and then reversed
(A, B, B, A): per shape, portattn's milliseconds (gradients of q, k and v from a kept forward; settled, median of 30,
``bench.time_ms``) and, in the same process, SDPA's cuDNN backend's on the same inputs, which shows how much the GPU
moved between the processes. Each tree is a folder holding ``portattn/`` and ``src_cuda/`` (e.g. a ``git archive`` of
the build to compare against).

    PYTHONPATH=. python3 scripts/ab_backward_trees.py /tmp/old $PWD
Prints a Markdown table: a row per shape, a column per process, "portattn ms (cuDNN ms)".
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

# (head dim, N, causal, dtype); H = 16, B·N = 32k tokens
SHAPES = [(64, 2048, False, "bfloat16"), (64, 2048, True, "bfloat16"), (64, 8192, False, "bfloat16"),
          (128, 2048, False, "bfloat16"), (128, 2048, True, "bfloat16"), (128, 8192, False, "bfloat16"),
          (128, 8192, True, "bfloat16"), (96, 8192, False, "bfloat16"), (256, 8192, False, "bfloat16"),
          (96, 2048, True, "bfloat16")]
CHILD_TIMEOUT_S = 150  # a process that takes longer (a hang) stops the comparison


def child(tree: str) -> None:
    """Time every shape with the portattn of ``tree``; print one JSON line {shape: [portattn ms, cuDNN ms]}."""
    sys.path.insert(0, tree)
    import torch

    from portattn import attention
    from portattn.tools import bench

    assert bench.__file__.startswith(os.path.abspath(tree)), bench.__file__
    res = {}
    for d, n, causal, dt in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(n + d)
        leaves = tuple(torch.randn(32768 // n, 16, n, d, device="cuda", dtype=getattr(torch, dt),
                                   generator=gen).requires_grad_() for _ in range(3))
        dout = torch.randn(leaves[0].shape, device="cuda", dtype=leaves[0].dtype, generator=gen)

        def backward_ms(forward) -> float:  # the backward alone, from one kept forward
            out = forward()
            return bench.time_ms(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True), 30, 3)

        ms = backward_ms(lambda: attention(*leaves, causal=causal))
        ref_ms = backward_ms(bench._sdpa("cudnn", *leaves, causal))
        res[f"{dt} d{d} N{n} {'causal' if causal else 'full'}"] = (ms, ref_ms)
        print(tree, d, n, causal, round(ms, 3), round(ref_ms, 3), file=sys.stderr, flush=True)
    print(json.dumps(res))


def main(trees: list[str]) -> int:
    runs = []
    for tree in trees + trees[::-1]:
        env = dict(os.environ, PYTHONPATH=tree)
        try:
            out = subprocess.run([sys.executable, __file__, "--child", tree], capture_output=True, text=True,
                                 env=env, timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            print("TIMEOUT", tree, exc.stderr[-2000:] if exc.stderr else "")
            return 1
        if out.returncode:
            print(out.stderr[-3000:])
            return 1
        runs.append((tree, json.loads(out.stdout.strip().splitlines()[-1])))
        print("done", tree, flush=True)
    names = [os.path.basename(tree.rstrip("/")) or tree for tree, _ in runs]
    print("| shape | " + " | ".join(f"{name} ms (cuDNN)" for name in names) + " |")
    print("|---|" + "---|" * len(runs))
    for key in runs[0][1]:
        print(f"| {key} | " + " | ".join(f"{r[key][0]:.3f} ({r[key][1]:.3f})" for _, r in runs) + " |")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        sys.exit(main(sys.argv[1:]))
