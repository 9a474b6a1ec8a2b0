"""How the work before a timed call moves its time on a GPU at its power limit: portattn's forward and SDPA's default
timed in turn in the benchmark's order (with SDPA's flash, cudnn and efficient backends) and as a pair in either order,
each with and without settling (``bench.settle``), bf16, d = 128, 16 heads, B·N = 32k; the SM clock (MHz) and power
(W) read through NVML after each measurement where nvidia-ml-py is installed (docs/benchmarks.md, "Timing at the power
limit").

    PYTHONPATH=. python3 scripts/timing_order.py
"""
from __future__ import annotations

import torch

import portattn
from portattn.tools.bench import SETTLE_MS, _sdpa, interleaved_ms

CASES = ((8192, False), (16384, True))  # (N, causal)


def clocks() -> str:
    try:
        import pynvml
    except ImportError:
        return ""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    return f"  [{mhz} MHz, {pynvml.nvmlDeviceGetPowerUsage(handle) // 1000} W]"


def main() -> None:
    for n, causal in CASES:
        batch, heads, d = 32768 // n, 16, 128
        gen = torch.Generator(device="cuda").manual_seed(n)
        q, k, v = (torch.randn(batch, heads, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(3))
        calls = {"portattn": lambda: portattn.attention(q, k, v, causal=causal)}
        calls |= {name: _sdpa(name, q, k, v, causal) for name in ("default", "flash", "cudnn", "efficient")}
        orders = {"benchmark's order": list(calls), "portattn, default": ["portattn", "default"],
                  "default, portattn": ["default", "portattn"]}
        flops = 4 * batch * heads * n * n * d / (2 if causal else 1)
        for settle_ms in (0.0, SETTLE_MS):
            for rnd in range(2):
                for label, names in orders.items():
                    ms = interleaved_ms({name: calls[name] for name in names}, reps=30, warmup=5, settle_ms=settle_ms)
                    rates = ", ".join(f"{name} {flops / ms[name] / 1e9:.1f}" for name in names)
                    print(f"N={n} causal={causal} settle={settle_ms:g} ms round {rnd}: {label}: {rates} TFLOP/s"
                          f"{clocks()}", flush=True)


if __name__ == "__main__":
    main()
