"""Benchmark: portattn against PyTorch SDPA's default and its named backends, in one process, on the same inputs.

Each measurement is the median over ``reps`` launches timed with CUDA events after ``warmup`` launches, each run of
timed launches preceded by about SETTLE_MS of the same call untimed (``settle``).
Forward TFLOP/s = 4·B·H·Nq·Nk·d / time, halved for causal; the backward counts 2.5 times the forward's FLOPs
(flash-attn's convention).
"""
from __future__ import annotations

import functools
import json
import math
import statistics
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable, TypeVar

import torch

from ..ops.attention import attention
from .reference import reference_attention, reference_gradients, relative_error
from .testing import capture_graph

SDPA_BACKENDS = ("default", "flash", "cudnn", "efficient")  # "default": whatever SDPA picks itself
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class BenchRow:
    """One configuration. Forward rows time the forward; backward rows (``mode == "backward"``) time the backward
    alone (``portattn_ms``, TFLOP/s), and also record forward+backward times and the peak memory of one
    forward+backward beyond the inputs (``fwdbwd_ms``, ``peak_mib``: keyed by "portattn" and the SDPA backends)."""

    dtype: str
    head_dim: int
    causal: bool
    seqlen: int
    batch: int
    heads: int
    portattn_ms: float
    portattn_tflops: float
    max_rel_error: float  # portattn vs float64 on the first (batch, head) slice(s): output, or the largest gradient
    sdpa_tflops: dict[str, float | None] = field(default_factory=dict)
    mode: str = "forward"
    heads_kv: int | None = None  # key/value heads where fewer than the query heads (grouped-query attention)
    fwdbwd_ms: dict[str, float | None] = field(default_factory=dict)
    peak_mib: dict[str, float | None] = field(default_factory=dict)

    def ratio(self, backend: str) -> float | None:
        other = self.sdpa_tflops.get(backend)
        return self.portattn_tflops / other if other else None


# A GPU at its power limit clocks down under a long matrix load and up again after a lighter one (an H200 at 700 W:
# 1.55-1.70 GHz against 1.98 GHz), so a call timed right after a lighter one (another backend's, a reference's) reads
# up to 12 % faster than under its own load (bf16, d = 128, 8192 queries: 704 against 611-636 TFLOP/s, both timed
# in one process). Each run of timed launches therefore starts once the call's own load has held the clocks for about
# this long.
SETTLE_MS = 100.0
SETTLE_MAX_CALLS = 1000  # calls short enough to wait on the host need no more to settle


def settle(fn: Callable[[], object], ms: float = SETTLE_MS) -> None:
    """Run ``fn`` untimed for about ``ms`` milliseconds of its GPU time (at most SETTLE_MAX_CALLS calls), so that
    the clocks under which it is timed next are those its own load holds, not those the work before it left."""
    first_ms = samples_ms(fn, 1, 0, settle_ms=0)[0]
    for _ in range(min(SETTLE_MAX_CALLS, math.ceil(ms / max(first_ms, 1e-3))) - 1):
        fn()


def samples_ms(fn: Callable[[], object], reps: int, warmup: int, settle_ms: float = SETTLE_MS) -> list[float]:
    """Milliseconds of each of ``reps`` runs of ``fn`` (after ``warmup`` untimed ones and about ``settle_ms`` of
    ``settle``), CUDA events around each."""
    for _ in range(warmup):
        fn()
    if settle_ms > 0:
        settle(fn, settle_ms)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def time_ms(fn: Callable[[], object], reps: int, warmup: int) -> float:
    """Median milliseconds of ``fn`` over ``reps`` runs, CUDA events around each run."""
    return statistics.median(samples_ms(fn, reps, warmup))


def interleaved_ms(fns: dict[str, Callable[[], object]], reps: int, warmup: int, rounds: int = 3,
                   settle_ms: float = SETTLE_MS) -> dict[str, float]:
    """Median milliseconds of each of ``fns`` over ``reps`` runs, taken in ``rounds`` rounds that run the calls in
    turn (``reps / rounds`` runs each, after ``warmup`` untimed runs of each, each round's runs after ``settle_ms`` of
    ``settle``): a drift of the GPU's clocks during the measurement weighs on every call alike instead of on whichever
    ran during it."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    per_round = max(1, -(-reps // rounds))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name] += samples_ms(fn, per_round, 0, settle_ms)
    return {name: statistics.median(ms) for name, ms in samples.items()}


def best_rounds(timers: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each timer's lowest reading over ``rounds`` rounds that run the timers in turn, after one round that warms
    up: all of them sample the same stretches of the host's varying speed."""
    best = dict.fromkeys(timers, float("inf"))
    for round_ in range(rounds + 1):
        for name, timer in timers.items():
            reading = timer()
            if round_:
                best[name] = min(best[name], reading)
    return best


def alternating_ms(fns: dict[str, Callable[[], object]], reps: int, rounds: int = 5) -> dict[str, float]:
    """Milliseconds of each of ``fns``: the median of ``reps`` runs (``time_ms``), its best of ``rounds`` rounds
    (``best_rounds``). Calls short enough to wait on the host's launches time the host as much as the GPU."""
    return best_rounds({name: functools.partial(time_ms, fn, reps, 0) for name, fn in fns.items()}, rounds)


def _sdpa_context(backend: str):
    """A context that makes SDPA use ``backend`` (nothing for "default")."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backend == "default":
        return contextlib.nullcontext()
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend])


def _sdpa(backend: str, q, k, v, causal: bool) -> Callable[[], object] | None:
    def run():
        with _sdpa_context(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=q.shape[1] != k.shape[1])

    try:
        with warnings.catch_warnings():  # a refusing backend warns why before raising; the table says "—"
            warnings.simplefilter("ignore", UserWarning)
            run()
        torch.cuda.synchronize()
    except RuntimeError:
        return None  # backend does not take this dtype / shape
    return run


def bench_case(dtype: str, head_dim: int, causal: bool, seqlen: int, heads: int = 16, tokens: int = 32768,
               reps: int = 30, warmup: int = 5, heads_kv: int | None = None) -> BenchRow:
    """The forward on [tokens / seqlen, heads, seqlen, head_dim] inputs (``heads_kv`` key/value heads: grouped-query
    attention), against each SDPA backend on the same inputs, the calls timed in turn (``interleaved_ms``)."""
    batch = max(1, tokens // seqlen)
    hk = heads_kv or heads
    gen = torch.Generator(device="cuda").manual_seed(seqlen * 1000 + head_dim)
    q, k, v = (torch.randn(batch, h, seqlen, head_dim, device="cuda", dtype=_DTYPES[dtype], generator=gen)
               for h in (heads, hk, hk))
    out = torch.full_like(q, float("nan"))
    attention(q, k, v, causal=causal, out=out)
    group = heads // hk
    ref, _ = reference_attention(q[:1, :2 * group], k[:1, :2], v[:1, :2], causal)
    err = relative_error(out[:1, :2 * group], ref)
    flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    fns = {"portattn": lambda: attention(q, k, v, causal=causal)}  # allocating its output, as SDPA does
    fns |= {name: fn for name in SDPA_BACKENDS if (fn := _sdpa(name, q, k, v, causal)) is not None}
    ms = interleaved_ms(fns, reps, warmup)
    row = BenchRow(dtype, head_dim, causal, seqlen, batch, heads, ms["portattn"], flops / ms["portattn"] / 1e9, err,
                   heads_kv=hk if hk != heads else None)
    row.sdpa_tflops = {name: flops / ms[name] / 1e9 if name in ms else None for name in SDPA_BACKENDS}
    return row


def _grads_fn(fwd: Callable[[], torch.Tensor], leaves: tuple, dout: torch.Tensor) -> Callable[[], object]:
    return lambda: torch.autograd.grad(fwd(), leaves, dout)


def _peak_mib(fn: Callable[[], object]) -> float:
    """Peak memory of one call beyond what was allocated before it, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def bench_backward_case(dtype: str, head_dim: int, causal: bool, seqlen: int, heads: int = 16, tokens: int = 32768,
                        reps: int = 20, warmup: int = 3) -> BenchRow:
    """Backward alone (gradients of q, k, v from a kept forward) and forward+backward, portattn and each SDPA backend
    on the same inputs; gradients checked against float64 on the first (batch, head) slice."""
    batch = max(1, tokens // seqlen)
    gen = torch.Generator(device="cuda").manual_seed(seqlen * 1000 + head_dim + 7)
    leaves = tuple(torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=_DTYPES[dtype],
                               generator=gen).requires_grad_() for _ in range(3))
    q, k, v = leaves
    dout = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen)
    fwd = lambda: attention(q, k, v, causal=causal)  # noqa: E731
    out = fwd()
    grads = torch.autograd.grad(out, leaves, dout, retain_graph=True)
    refs = reference_gradients(q[:1, :1], k[:1, :1], v[:1, :1], dout[:1, :1], causal)
    largest = max(float(r.abs().max()) for r in refs)
    err = max(float((g[:1, :1].double() - r).abs().max()) for g, r in zip(grads, refs)) / largest
    flops = 2.5 * 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    ms = time_ms(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True), reps, warmup)
    row = BenchRow(dtype, head_dim, causal, seqlen, batch, heads, ms, flops / ms / 1e9, err, mode="backward")
    row.fwdbwd_ms["portattn"] = time_ms(_grads_fn(fwd, leaves, dout), reps, warmup)
    row.peak_mib["portattn"] = _peak_mib(_grads_fn(fwd, leaves, dout))
    out = grads = None  # free the kept graph before measuring SDPA
    for name in SDPA_BACKENDS:
        sdpa_fwd = _sdpa(name, q, k, v, causal)
        sdpa_out = None
        if sdpa_fwd is not None:
            try:
                sdpa_out = sdpa_fwd()
                torch.autograd.grad(sdpa_out, leaves, dout, retain_graph=True)
            except RuntimeError:  # a backend with a forward but no backward for this case
                sdpa_out = None
        if sdpa_out is None:
            row.sdpa_tflops[name] = row.fwdbwd_ms[name] = row.peak_mib[name] = None
            continue
        bwd_ms = time_ms(lambda: torch.autograd.grad(sdpa_out, leaves, dout, retain_graph=True), reps, warmup)
        row.sdpa_tflops[name] = flops / bwd_ms / 1e9
        row.fwdbwd_ms[name] = time_ms(_grads_fn(sdpa_fwd, leaves, dout), reps, warmup)
        row.peak_mib[name] = _peak_mib(_grads_fn(sdpa_fwd, leaves, dout))
        sdpa_out = None
    return row


def format_table(rows: list[BenchRow]) -> str:
    """A markdown table; backward rows add forward+backward times and peak memory (portattn, SDPA's default and
    flash backends)."""
    backward = any(r.mode == "backward" for r in rows)
    head = ["dtype", "d", "causal", "N", "B", "H", "portattn TF/s", "rel err"]
    for name in SDPA_BACKENDS:
        head += [f"{name} TF/s", f"x {name}"]
    if backward:
        head += ["fwd+bwd ms", "default fwd+bwd ms", "peak MiB", "default peak MiB", "flash peak MiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda x, spec: "—" if x is None else format(x, spec)  # noqa: E731
    for r in rows:
        cells = [r.dtype, str(r.head_dim), "yes" if r.causal else "no", str(r.seqlen), str(r.batch),
                 f"{r.heads}:{r.heads_kv}" if r.heads_kv else str(r.heads), f"{r.portattn_tflops:.1f}",
                 f"{r.max_rel_error:.1e}"]
        for name in SDPA_BACKENDS:
            cells += [fmt(r.sdpa_tflops.get(name), ".1f"), fmt(r.ratio(name), ".2f")]
        if backward:
            cells += [fmt(r.fwdbwd_ms.get("portattn"), ".2f"), fmt(r.fwdbwd_ms.get("default"), ".2f"),
                      fmt(r.peak_mib.get("portattn"), ".0f"), fmt(r.peak_mib.get("default"), ".0f"),
                      fmt(r.peak_mib.get("flash"), ".0f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(dtypes: list[str], head_dims: list[int], seqlens: list[int], causal: list[bool], json_path: str | None,
        reps: int = 30, warmup: int = 5, backward: bool = False, heads: tuple[int, int] = (16, 16),
        tokens: int = 32768) -> list[BenchRow]:
    """Every configuration, printed as it completes; the rows also go to ``json_path`` when given. ``heads``:
    (query heads, key/value heads); ``tokens``: batch times sequence length."""
    extra = {"heads": heads[0], "tokens": tokens}
    if heads[1] != heads[0]:
        if backward:
            raise ValueError("--heads with fewer key/value heads times the forward only")
        extra["heads_kv"] = heads[1]
    case = bench_backward_case if backward else bench_case
    rows = []
    for dtype in dtypes:
        for d in head_dims:
            for c in causal:
                for n in seqlens:
                    rows.append(case(dtype, d, c, n, reps=reps, warmup=warmup, **extra))
                    print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"meta": bench_meta(), "rows": [asdict(r) for r in rows]}, f, indent=1)
    return rows


def bench_meta() -> dict[str, str]:
    """Where the numbers come from: device name and torch version."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__}


@dataclass
class DecodeRow:
    """One decode call (one query row per sequence): kernel-only time (``graph_us``) and end-to-end time
    (eager calls), microseconds, for portattn (contiguous and paged caches) and each SDPA backend; K+V read in
    GB/s from the kernel-only times."""

    dtype: str
    head_dim: int
    heads_q: int
    heads_kv: int
    batch: int
    keys: int
    bytes: int  # K and V bytes a call must read
    kernel_us: dict[str, float | None] = field(default_factory=dict)
    eager_us: dict[str, float | None] = field(default_factory=dict)
    max_rel_error: float = 0.0

    def gbps(self, name: str) -> float | None:
        t = self.kernel_us.get(name)
        return self.bytes / t / 1e3 if t else None


_Set = TypeVar("_Set")
MIN_GRAPH_CALLS = 8  # calls per timed graph, so that the GPU's time dwarfs the host's cost of one replay
MAX_INPUT_COPIES = 64


def graph_us(calls: list[Callable[[], object]], reps: int) -> float:
    """GPU microseconds per call: one CUDA graph runs ``calls`` back to back and is replayed ``reps`` times (CUDA
    events around each replay, median), divided by the calls. A replay costs the host about as long as a short
    decode call takes the GPU, so a graph of one call would time the host; here the GPU runs the calls without a
    gap beyond what the launches themselves leave."""
    graph, _ = capture_graph(lambda: [call() for call in calls])
    return 1e3 * time_ms(graph.replay, reps, 3) / len(calls)


def input_copies(nbytes: int) -> int:
    """Copies of inputs of ``nbytes`` that together exceed three times the GPU's L2 cache (at most
    MAX_INPUT_COPIES): calls cycling through them read memory, not a cache the previous call filled."""
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 64 << 20
    return max(1, min(MAX_INPUT_COPIES, -(-3 * l2 // nbytes)))


def cycled(sets: list[_Set], call: Callable[[_Set], object]) -> list[Callable[[], object]]:
    """``call`` on each of ``sets`` (copies of a call's inputs) in turn, at least MIN_GRAPH_CALLS calls: a graph of
    them (``graph_us``) reads memory, not what the previous call left in the L2."""
    return [lambda s=sets[i % len(sets)]: call(s) for i in range(max(len(sets), MIN_GRAPH_CALLS))]


def kv_bytes(dt: torch.dtype, head_dim: int, heads_kv: int, batch: int, keys: int) -> int:
    """Bytes of K and V that a decode call over ``keys`` keys per sequence reads."""
    return 2 * batch * keys * heads_kv * head_dim * dt.itemsize


def decode_input_sets(dt: torch.dtype, head_dim: int, heads_q: int, heads_kv: int, batch: int, keys: int,
                      page_size: int) -> list[dict[str, torch.Tensor]]:
    """``input_copies`` differently seeded copies of ``decode_inputs``."""
    return [decode_inputs(dt, head_dim, heads_q, heads_kv, batch, keys, page_size, keys + batch + i)
            for i in range(input_copies(kv_bytes(dt, head_dim, heads_kv, batch, keys)))]


def decode_inputs(dt: torch.dtype, head_dim: int, heads_q: int, heads_kv: int, batch: int, keys: int,
                   page_size: int, seed: int) -> dict[str, torch.Tensor]:
    """Random q, contiguous caches k, v, lengths, and the same keys in scattered pages (table, k_pool, v_pool)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, 1, heads_q, head_dim, device="cuda", dtype=dt, generator=gen)
    k = torch.randn(batch, keys, heads_kv, head_dim, device="cuda", dtype=dt, generator=gen)
    v = torch.randn(batch, keys, heads_kv, head_dim, device="cuda", dtype=dt, generator=gen)
    lengths = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
    pages = -(-keys // page_size)
    table = torch.randperm(batch * pages, device="cuda", generator=gen).to(torch.int32).view(batch, pages)
    pools = []
    for src in (k, v):
        pool = torch.empty(batch * pages, page_size, heads_kv, head_dim, device="cuda", dtype=dt)
        full = torch.zeros(batch, pages * page_size, heads_kv, head_dim, device="cuda", dtype=dt)
        full[:, :keys] = src
        pool[table.flatten().long()] = full.view(batch * pages, page_size, heads_kv, head_dim)
        pools.append(pool)
    return {"q": q, "k": k, "v": v, "lengths": lengths, "table": table, "k_pool": pools[0], "v_pool": pools[1]}


def bench_decode_case(dtype: str, head_dim: int, heads_q: int, heads_kv: int, batch: int, keys: int,
                      page_size: int = 64, reps: int = 50) -> DecodeRow:
    """The same decode call through portattn (contiguous and paged caches) and SDPA's backends. Kernel time cycles
    through copies of the inputs (``input_copies``); eager time repeats the call on the first copy, the backends in
    alternating rounds (``alternating_ms``)."""
    from ..ops.kvcache import attention_with_kvcache

    dt = _DTYPES[dtype]
    nbytes = kv_bytes(dt, head_dim, heads_kv, batch, keys)
    sets = decode_input_sets(dt, head_dim, heads_q, heads_kv, batch, keys, page_size)

    def calls(s: dict[str, torch.Tensor]) -> dict[str, Callable[[], object]]:
        out: dict[str, Callable[[], object]] = {
            "portattn": lambda: attention_with_kvcache(s["q"], s["k"], s["v"], cache_seqlens=s["lengths"]),
            "portattn paged": lambda: attention_with_kvcache(s["q"], s["k_pool"], s["v_pool"],
                                                             cache_seqlens=s["lengths"], block_table=s["table"]),
        }
        for name in SDPA_BACKENDS:
            fn = _sdpa(name, s["q"].transpose(1, 2), s["k"].transpose(1, 2), s["v"].transpose(1, 2), False)
            if fn is not None:
                out[f"SDPA {name}"] = fn
        return out

    per_set = [calls(s) for s in sets]
    first = sets[0]
    ref, _ = reference_attention(*(first[n][:1].transpose(1, 2) for n in ("q", "k", "v")))
    row = DecodeRow(dtype, head_dim, heads_q, heads_kv, batch, keys, nbytes)
    with torch.no_grad():
        got = per_set[0]["portattn paged"]()
        row.max_rel_error = relative_error(got[:1].transpose(1, 2), ref)
        for name in ["portattn", "portattn paged", *(f"SDPA {n}" for n in SDPA_BACKENDS)]:
            if name not in per_set[0]:
                row.kernel_us[name] = row.eager_us[name] = None
                continue
            row.kernel_us[name] = graph_us(cycled(per_set, lambda of_set, name=name: of_set[name]()), reps)
        eager = alternating_ms(per_set[0], max(1, reps // 5))
        row.eager_us.update({name: 1e3 * ms for name, ms in eager.items()})
    return row


def format_decode_table(rows: list[DecodeRow]) -> str:
    names = ["portattn", "portattn paged", *(f"SDPA {n}" for n in SDPA_BACKENDS)]
    head = ["dtype", "d", "Hq:Hk", "B", "keys", "rel err", *(f"{n} µs" for n in names), "portattn GB/s",
            "x SDPA default", "x SDPA flash", "paged / contiguous", "eager portattn µs", "eager SDPA default µs"]
    fmt = lambda x, spec: "—" if x is None else format(x, spec)  # noqa: E731
    ratio = lambda a, b: a / b if a and b else None  # noqa: E731
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ours = r.kernel_us["portattn"]
        cells = [r.dtype, str(r.head_dim), f"{r.heads_q}:{r.heads_kv}", str(r.batch), str(r.keys),
                 f"{r.max_rel_error:.1e}", *(fmt(r.kernel_us.get(n), ".1f") for n in names),
                 fmt(r.gbps("portattn"), ".0f"), fmt(ratio(r.kernel_us.get("SDPA default"), ours), ".2f"),
                 fmt(ratio(r.kernel_us.get("SDPA flash"), ours), ".2f"),
                 fmt(ratio(r.kernel_us.get("portattn paged"), ours), ".2f"),
                 fmt(r.eager_us.get("portattn"), ".1f"), fmt(r.eager_us.get("SDPA default"), ".1f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_decode(dtypes: list[str], head_dims: list[int], groups: list[tuple[int, int]], batches: list[int],
               keys: list[int], json_path: str | None, reps: int = 50) -> list[DecodeRow]:
    rows = []
    for dtype in dtypes:
        for d in head_dims:
            for hq, hk in groups:
                for b in batches:
                    for n in keys:
                        rows.append(bench_decode_case(dtype, d, hq, hk, b, n, reps=reps))
                        print(format_decode_table(rows[-1:]).splitlines()[-1], flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"meta": bench_meta(), "rows": [asdict(r) for r in rows]}, f, indent=1)
    return rows


def host_overhead_us(calls: int = 1000, rounds: int = 7) -> dict[str, float]:
    """Wall-clock microseconds per eager call on tiny tensors (host cost): SDPA, portattn.attention and SDPA routed
    by the patch, on decode-shaped calls (one query row over 64 keys, and over 4096 keys, which the decode kernels
    split: two launches) and causal prefill calls (64 rows), float16, 2 heads, d = 64, and a prefill call at
    d = 128 (on Hopper the warp-specialized kernel, whose copy maps are re-pointed at each call's tensors), and a
    training step (forward and backward, bfloat16, 8 heads, 64 rows, d = 64, causal; a tenth of the calls). Each of
    ``rounds`` rounds times ``calls`` calls of each of the three in turn; a call's figure is its best round, so
    that all three sample the same stretches of the host's varying speed."""
    import time

    from ..integrations.sdpa import patch_sdpa

    def per_call(fn, count: int = calls) -> float:
        start = time.perf_counter()
        for _ in range(count):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / count * 1e6

    kv = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)
    kv_long = torch.randn(1, 2, 4096, 64, device="cuda", dtype=torch.float16)
    q1 = torch.randn(1, 2, 1, 64, device="cuda", dtype=torch.float16)
    kv128 = torch.randn(1, 2, 64, 128, device="cuda", dtype=torch.float16)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    result: dict[str, float] = {}
    for shape, q, kv, causal in (("decode 1x2x1x64 over 64 keys", q1, kv, False),
                                 ("decode 1x2x1x64 over 4096 keys", q1, kv_long, False),
                                 ("prefill 1x2x64x64 causal", kv, kv, True),
                                 ("prefill 1x2x64x128 causal", kv128, kv128, True)):
        def patched() -> float:
            with patch_sdpa():
                routed = torch.nn.functional.scaled_dot_product_attention
                return per_call(lambda: routed(q, kv, kv, is_causal=causal))

        timers = {"F.scaled_dot_product_attention": lambda: per_call(lambda: sdpa(q, kv, kv, is_causal=causal)),
                  "portattn.attention": lambda: per_call(lambda: attention(q, kv, kv, causal=causal)),
                  "patched F.scaled_dot_product_attention": patched}
        result.update({f"{shape}: {name}": us for name, us in best_rounds(timers, rounds).items()})
    leaves = [torch.randn(1, 8, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    dout = torch.randn(1, 8, 64, 64, device="cuda", dtype=torch.bfloat16)
    steps = max(1, calls // 10)

    def patched_step() -> float:
        with patch_sdpa():
            routed = torch.nn.functional.scaled_dot_product_attention
            return per_call(lambda: routed(*leaves, is_causal=True).backward(dout), steps)

    timers = {"F.scaled_dot_product_attention": lambda: per_call(
                  lambda: sdpa(*leaves, is_causal=True).backward(dout), steps),
              "portattn.attention": lambda: per_call(lambda: attention(*leaves, causal=True).backward(dout), steps),
              "patched F.scaled_dot_product_attention": patched_step}
    result.update({f"training step 1x8x64x64 causal: {name}": us for name, us in best_rounds(timers, rounds).items()})
    return result
