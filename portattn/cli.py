"""Command line: ``portattn [demo|report|bench|info|cache clear]``."""
from __future__ import annotations

import argparse
import sys

from . import __version__


def _report(archs: list[str]) -> int:
    from .errors import PortattnError
    from .report import format_rows, report_rows
    from .target import Target

    status = 0
    for arch in archs:
        print(f"\n## {arch}", flush=True)
        try:
            print(format_rows(report_rows(Target.for_arch(arch))), flush=True)
        except (PortattnError, ImportError, OSError) as exc:
            print(f"skipped: {exc}")
            status = 1
    return status


def _demo() -> int:
    import torch

    if not torch.cuda.is_available():
        from .report import REPORT_ARCHS

        print("No GPU found: compiling every kernel variant instead (the resource report).")
        return _report(list(REPORT_ARCHS))
    from . import attention
    from .bench import format_table, run
    from .reference import reference_attention, relative_error
    from .forward import target_for

    dev = torch.device("cuda")
    print(f"portattn {__version__} on {torch.cuda.get_device_name()} — target {target_for(dev)}")
    worst = 0.0
    for d in (64, 128):
        for causal in (False, True):
            q, k, v = (torch.randn(2, 4, 777, d, device=dev) for _ in range(3))
            ref, _ = reference_attention(q, k, v, causal)
            err = relative_error(attention(q, k, v, causal=causal), ref)
            print(f"check d={d} causal={causal}: relative error vs float64 = {err:.2e}")
            worst = max(worst, err) if err == err else float("inf")
    if worst > 1e-5:
        print("FAILED: error above 1e-5")
        return 1
    rows = run(["float32"], [64, 128], [4096], [False, True], None, reps=10, warmup=3)
    print()
    print(format_table(rows))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .bench import format_table, run

    rows = run(args.dtype, args.head_dim, args.seqlen, [c == "yes" for c in args.causal], args.json,
               reps=args.reps, warmup=args.warmup)
    print()
    print(format_table(rows))
    return 0


def _info() -> int:
    import torch

    from .compile.cache import DiskCache

    cache = DiskCache()
    print(f"portattn {__version__}, torch {torch.__version__}")
    print(f"cache: {cache.directory} ({len(cache.entries())} entries, {cache.size_bytes()} bytes)")
    if torch.cuda.is_available():
        from .forward import target_for
        from .select import DTYPES, HEAD_DIMS, select

        target = target_for(torch.device("cuda"))
        print(f"target: {target}")
        for dtype in DTYPES:
            for d in HEAD_DIMS:
                print(f"  {dtype} d={d}: {select(target, dtype, d).label}")
    else:
        print("target: no GPU")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="portattn", description=__doc__)
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("demo", help="check and time attention on the GPU; without one, print the resource report")
    rep = sub.add_parser("report", help="compile every kernel variant and print resources (no GPU needed)")
    rep.add_argument("--arch", default="all", help="sm_80, sm_90, gfx90a or all")
    b = sub.add_parser("bench", help="portattn vs PyTorch SDPA backends")
    b.add_argument("--dtype", nargs="+", default=["float32"])
    b.add_argument("--head-dim", nargs="+", type=int, default=[64, 128])
    b.add_argument("--seqlen", nargs="+", type=int, default=[4096])
    b.add_argument("--causal", nargs="+", choices=["no", "yes"], default=["no", "yes"])
    b.add_argument("--reps", type=int, default=30)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--json", default="portattn-bench.json")
    sub.add_parser("info", help="detected target, kernel choices and cache")
    cache = sub.add_parser("cache", help="manage the kernel cache")
    cache.add_argument("action", choices=["clear"])
    args = parser.parse_args(argv)
    if args.cmd in (None, "demo"):
        return _demo()
    if args.cmd == "report":
        from .report import REPORT_ARCHS

        return _report(list(REPORT_ARCHS) if args.arch == "all" else [args.arch])
    if args.cmd == "bench":
        return _bench(args)
    if args.cmd == "info":
        return _info()
    from .compile.cache import DiskCache

    print(f"removed {DiskCache().clear()} cache entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
