"""Benchmark: portattn against PyTorch SDPA's backends, in one process, on the same inputs.

Each measurement is the median over ``reps`` launches timed with CUDA events after ``warmup`` launches.
TFLOP/s = 4·B·H·Nq·Nk·d / time, halved for causal.
"""
from __future__ import annotations

import json
import statistics
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from ..ops.attention import attention
from .reference import reference_attention, relative_error

SDPA_BACKENDS = ("flash", "cudnn", "efficient")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class BenchRow:
    dtype: str
    head_dim: int
    causal: bool
    seqlen: int
    batch: int
    heads: int
    portattn_ms: float
    portattn_tflops: float
    max_rel_error: float  # portattn vs float64 reference on the first (batch, head) slices
    sdpa_tflops: dict[str, float | None] = field(default_factory=dict)

    def ratio(self, backend: str) -> float | None:
        other = self.sdpa_tflops.get(backend)
        return self.portattn_tflops / other if other else None


def time_ms(fn: Callable[[], object], reps: int, warmup: int) -> float:
    """Median milliseconds of ``fn`` over ``reps`` runs, CUDA events around each run."""
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def _sdpa(backend: str, q, k, v, causal: bool) -> Callable[[], object] | None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

    def run():
        with sdpa_kernel(which):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    try:
        with warnings.catch_warnings():  # a refusing backend warns why before raising; the table says "—"
            warnings.simplefilter("ignore", UserWarning)
            run()
        torch.cuda.synchronize()
    except RuntimeError:
        return None  # backend does not take this dtype / shape
    return run


def bench_case(dtype: str, head_dim: int, causal: bool, seqlen: int, heads: int = 16, tokens: int = 32768,
               reps: int = 30, warmup: int = 5) -> BenchRow:
    batch = max(1, tokens // seqlen)
    gen = torch.Generator(device="cuda").manual_seed(seqlen * 1000 + head_dim)
    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=_DTYPES[dtype], generator=gen)
               for _ in range(3))
    out = torch.full_like(q, float("nan"))
    attention(q, k, v, causal=causal, out=out)
    ref, _ = reference_attention(q[:1, :2], k[:1, :2], v[:1, :2], causal)
    err = relative_error(out[:1, :2], ref)
    flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    ms = time_ms(lambda: attention(q, k, v, causal=causal, out=out), reps, warmup)
    row = BenchRow(dtype, head_dim, causal, seqlen, batch, heads, ms, flops / ms / 1e9, err)
    for name in SDPA_BACKENDS:
        fn = _sdpa(name, q, k, v, causal)
        row.sdpa_tflops[name] = flops / time_ms(fn, reps, warmup) / 1e9 if fn else None
    return row


def format_table(rows: list[BenchRow]) -> str:
    head = ["dtype", "d", "causal", "N", "B", "portattn TF/s", "rel err"]
    for name in SDPA_BACKENDS:
        head += [f"{name} TF/s", f"x {name}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda x, spec: "—" if x is None else format(x, spec)  # noqa: E731
    for r in rows:
        cells = [r.dtype, str(r.head_dim), "yes" if r.causal else "no", str(r.seqlen), str(r.batch),
                 f"{r.portattn_tflops:.1f}", f"{r.max_rel_error:.1e}"]
        for name in SDPA_BACKENDS:
            cells += [fmt(r.sdpa_tflops[name], ".1f"), fmt(r.ratio(name), ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(dtypes: list[str], head_dims: list[int], seqlens: list[int], causal: list[bool], json_path: str | None,
        reps: int = 30, warmup: int = 5) -> list[BenchRow]:
    rows = []
    for dtype in dtypes:
        for d in head_dims:
            for c in causal:
                for n in seqlens:
                    rows.append(bench_case(dtype, d, c, n, reps=reps, warmup=warmup))
                    print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"meta": bench_meta(), "rows": [asdict(r) for r in rows]}, f, indent=1)
    return rows


def bench_meta() -> dict[str, str]:
    """Where the numbers come from: device name and torch version."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
