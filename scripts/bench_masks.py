"""Masks on the GPU, bf16, d = 128: a sliding window against the full causal mask, and a packed variable-length batch
against the padded batch of the same sequences (SDPA's default backend on the padded batch with its boolean mask, and
portattn on it), forward and forward + backward; decoding over a KV cache with a window against the full cache.
CUDA events, median of 30 runs after warmup; prints a Markdown table."""
from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

import portattn
from portattn.flash_attn import flash_attn_func, flash_attn_varlen_func
from portattn.tools.bench import MIN_GRAPH_CALLS, graph_us


def median_ms(fn, runs: int = 30) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def train_step(fn, inputs: tuple[torch.Tensor, ...]):
    """A callable running ``fn(*inputs)`` forward and backward (inputs require grad)."""
    leaves = [t.detach().requires_grad_() for t in inputs]
    grad = torch.randn_like(fn(*leaves))
    return lambda: torch.autograd.backward(fn(*leaves), grad)


def row(case: str, shape: str, ours: float, baseline: str, theirs: float) -> None:
    print(f"| {case} | {shape} | {ours:.3f} | {baseline} | {theirs:.3f} | {theirs / ours:.2f}x |")


def main() -> None:
    torch.manual_seed(0)
    dt, d, h = torch.bfloat16, 128, 16
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| case | shape | portattn ms | baseline | baseline ms | ratio |")
    print("|---|---|---|---|---|---|")
    for n, window in ((8192, 1024), (32768, 4096)):
        q, k, v = (torch.randn(1, n, h, d, device="cuda", dtype=dt) for _ in range(3))
        full = median_ms(lambda: flash_attn_func(q, k, v, causal=True))
        win = median_ms(lambda: flash_attn_func(q, k, v, causal=True, window_size=(window, 0)))
        row(f"window {window} vs full causal", f"1x{n}x{h}x{d}", win, "portattn causal", full)
        full = median_ms(train_step(lambda q, k, v: flash_attn_func(q, k, v, causal=True), (q, k, v)))
        win = median_ms(train_step(lambda q, k, v: flash_attn_func(q, k, v, causal=True, window_size=(window, 0)),
                                   (q, k, v)))
        row(f"fwd + bwd, window {window} vs full causal", f"1x{n}x{h}x{d}", win, "portattn causal", full)
    lengths = [512, 4096, 1024, 2048, 300, 3800, 128, 4000]
    nmax, b = max(lengths), len(lengths)
    q, k, v = (torch.randn(sum(lengths), h, d, device="cuda", dtype=dt) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    varlen = median_ms(lambda: flash_attn_varlen_func(q, k, v, cu, cu, nmax, nmax, causal=True))
    pad = [torch.zeros(b, nmax, h, d, device="cuda", dtype=dt) for _ in range(3)]
    keep = torch.arange(nmax, device="cuda") < torch.tensor(lengths, device="cuda").unsqueeze(1)
    mask = keep[:, None, None, :] & torch.ones(nmax, nmax, dtype=torch.bool, device="cuda").tril()
    for t, packed in zip(pad, (q, k, v)):
        t[keep] = packed
    qp, kp, vp = (t.transpose(1, 2) for t in pad)
    sdpa_masked = median_ms(lambda: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask))
    padded = median_ms(lambda: portattn.attention(qp, kp, vp, causal=True))
    shape = f"{b} seqs {min(lengths)}-{nmax}, H={h}, d={d}"
    row("varlen causal vs SDPA default, padded + mask", shape, varlen, "SDPA", sdpa_masked)
    row("varlen causal vs portattn padded causal", shape, varlen, "portattn padded", padded)
    varlen = median_ms(train_step(lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu, nmax, nmax, causal=True),
                                  (q, k, v)))
    sdpa_masked = median_ms(train_step(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                       (qp, kp, vp)))
    padded = median_ms(train_step(lambda q, k, v: portattn.attention(q, k, v, causal=True), (qp, kp, vp)))
    row("fwd + bwd, varlen causal vs SDPA default, padded + mask", shape, varlen, "SDPA", sdpa_masked)
    row("fwd + bwd, varlen causal vs portattn padded causal", shape, varlen, "portattn padded", padded)
    decode_window(dt, d)


def decode_window(dt: torch.dtype, d: int) -> None:
    """One decoding step of 8 sequences (32 query heads, 8 key/value heads) over 32768 cached keys: a 4096-key
    window against the whole cache; kernel time as GPU time per call (``graph_us``: a CUDA graph of back-to-back
    calls), with the bandwidth of the K and V bytes read."""
    b, n, hq, hk, window = 8, 32768, 32, 8, 4096
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=dt)
    k_cache, v_cache = (torch.randn(b, n, hk, d, device="cuda", dtype=dt) for _ in range(2))
    times = {}
    for name, w in (("full", None), ("window", (window, 0))):
        def step(w=w):
            return portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=n, window=w)
        times[name] = graph_us([step] * MIN_GRAPH_CALLS, 30) / 1e3
    shape = f"{b}x1x{hq}x{d}, Hk={hk}, {n} keys"
    row(f"decode, window {window} vs full cache (GPU time per call)", shape, times["window"], "portattn full",
        times["full"])
    for name, keys in (("full", n), ("window", window + 1)):
        gbs = 2 * b * keys * hk * d * 2 / times[name] / 1e6
        print(f"<!-- decode {name}: {gbs:.0f} GB/s of K and V -->")


if __name__ == "__main__":
    main()
