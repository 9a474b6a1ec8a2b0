"""Masks on the GPU: a sliding window against the full causal mask, and a packed variable-length batch against the
padded batch of the same sequences (SDPA's default backend on the padded batch with its boolean mask, and portattn
on it), forward only, bf16, d = 128. CUDA events, median of 30 runs after warmup; prints a Markdown table."""
from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

import portattn
from portattn.flash_attn import flash_attn_func, flash_attn_varlen_func


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
        print(f"| window {window} vs full causal | 1x{n}x{h}x{d} | {win:.3f} | portattn causal | {full:.3f} | "
              f"{full / win:.2f}x |")
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
    print(f"| varlen causal vs SDPA default, padded + mask | {shape} | {varlen:.3f} | SDPA | {sdpa_masked:.3f} | "
          f"{sdpa_masked / varlen:.2f}x |")
    print(f"| varlen causal vs portattn padded causal | {shape} | {varlen:.3f} | portattn padded | {padded:.3f} | "
          f"{padded / varlen:.2f}x |")


if __name__ == "__main__":
    main()
