"""``portattn demo``: on a GPU, check attention against float64 and time it against PyTorch SDPA; without one,
compile every kernel variant and print the resource report."""
from __future__ import annotations

import torch

from ..ops.attention import attention
from ..runtime.target import target_for
from ..version import __version__
from .bench import format_table, run
from .reference import reference_attention, relative_error


def demo() -> int:
    """Check and time attention on the GPU; without one, print the resource report."""
    if not torch.cuda.is_available():
        from .report import REPORT_ARCHS, print_report

        print("No GPU found: compiling every kernel variant instead (the resource report).")
        return print_report(list(REPORT_ARCHS))

    dev = torch.device("cuda")
    print(f"portattn {__version__} on {torch.cuda.get_device_name()} — target {target_for(dev)}")
    # Relative error bounds against float64: float32 to 1e-5; the 16-bit types are bounded by their rounding.
    limits = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}
    failed = False
    for dtype, limit in limits.items():
        for d in (64, 128):
            for causal in (False, True):
                q, k, v = (torch.randn(2, 4, 777, d, device=dev).to(dtype) for _ in range(3))
                ref, _ = reference_attention(q, k, v, causal)
                err = relative_error(attention(q, k, v, causal=causal), ref)
                ok = err <= limit  # False for NaN too
                failed |= not ok
                print(f"check {str(dtype).removeprefix('torch.')} d={d} causal={causal}: relative error vs float64 "
                      f"= {err:.2e} ({'ok' if ok else f'FAILED, limit {limit:.0e}'})")
    if failed:
        return 1
    rows = run(["float16", "bfloat16", "float32"], [64, 128], [4096], [False, True], None, reps=10, warmup=3)
    print()
    print(format_table(rows))
    return 0
