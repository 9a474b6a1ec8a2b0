"""Command line: ``portattn [demo|report|bench|plot|info|warmup|cache clear]``."""
from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from ..version import __version__

if TYPE_CHECKING:
    from ..runtime.compiler import CompiledKernel
    from ..runtime.target import Target


def _bench(args: argparse.Namespace) -> int:
    from .bench import bench_meta, format_table, run

    if args.plot:
        from .plot import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as exc:
            print(f"portattn bench --plot: {exc}", file=sys.stderr)
            return 2
    if args.overhead:
        from .bench import host_overhead_us

        for name, us in host_overhead_us().items():
            print(f"host cost per eager call, {name}: {us:.1f} µs")
        return 0
    if args.decode:
        from .bench import format_decode_table, run_decode

        groups = [tuple(int(x) for x in g.split(":")) for g in args.groups]
        rows = run_decode(args.dtype, args.head_dim, groups, args.batch, args.keys, args.json)
        print()
        print(format_decode_table(rows))
        return 0
    hq, _, hk = args.heads.partition(":")
    try:
        heads = (int(hq), int(hk or hq))
        if heads[0] < 1 or heads[1] < 1 or heads[0] % heads[1]:
            raise ValueError
    except ValueError:
        print(f"portattn bench: --heads must be H or HQ:HK with HK dividing HQ, got {args.heads!r}", file=sys.stderr)
        return 2
    if args.backward and heads[0] != heads[1]:
        print("portattn bench: --backward times equal query and key/value heads only", file=sys.stderr)
        return 2
    rows = run(args.dtype, args.head_dim, args.seqlen, [c == "yes" for c in args.causal], args.json,
               reps=args.reps, warmup=args.warmup, backward=args.backward, heads=heads, tokens=args.tokens)
    print()
    print(format_table(rows))
    if args.plot:
        from .plot import plot_rows

        print(f"plot: {plot_rows(rows, args.plot, bench_meta())}")
    return 0


def _plot(json_path: str, out: str | None) -> int:
    from .plot import load_rows, plot_rows

    try:
        rows, meta = load_rows(json_path)
        path = plot_rows(rows, out or str(Path(json_path).with_suffix(".png")), meta)
    except (ImportError, OSError, ValueError) as exc:
        print(f"portattn plot: {exc}", file=sys.stderr)
        return 2
    print(f"plot: {path}")
    return 0


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _compiler_version(vendor: str) -> str:
    from ..errors import PortattnError
    from ..runtime.backend import backend_for

    if vendor == "hip":
        from ..runtime.hiprtc import toolchain_missing

        missing = toolchain_missing()
        if missing:
            return f"unavailable: {missing}"
    try:
        return backend_for(vendor).compiler.version()
    except (PortattnError, ImportError, OSError) as exc:
        return f"unavailable: {exc}"


def _rocm_toolchains() -> list[str]:
    """One line per ROCm hiprtc toolchain present: version and the AMD processors of portattn's tables it knows."""
    from ..errors import PortattnError
    from ..runtime.target import KNOWN_ARCHS
    from ..runtime.toolchains import all_toolchains, toolchains_dir

    found = all_toolchains()
    if not found:
        return [f"ROCm toolchains: none (no system ROCm, no chroot toolchain in {toolchains_dir()})"]
    lines = ["ROCm toolchains (portattn report --arch gfx942 --rocm 6.4 picks one):"]
    for t in found:
        why = t.missing()
        if why is None:
            try:
                knows = [a for a in KNOWN_ARCHS if a.startswith("gfx") and a in t.supported_archs()]
                why = "targets " + (", ".join(knows) or "none of portattn's AMD archs")
            except PortattnError as exc:
                why = f"unusable: {exc}"
        else:
            why = f"unusable here: {why}"
        where = "" if t.root is None else f" at {t.root}"
        lines.append(f"  {t.name}: ROCm {t.rocm_release} (comgr {t.comgr_version}){where}; {why}")
    return lines


def _parse_targets(archs: list[str] | None) -> list[Target]:
    """Targets for ``--arch`` values ("all": the report's archs), else those of the visible GPUs (none on a CPU
    machine)."""
    import torch

    from ..runtime.target import Target
    from .report import REPORT_ARCHS

    if archs:
        names = [a for arch in archs for a in (REPORT_ARCHS if arch == "all" else (arch,))]
        return [Target.for_arch(a) for a in dict.fromkeys(names)]
    if not torch.cuda.is_available():
        return []
    from ..runtime.target import target_for

    return list(dict.fromkeys(target_for(torch.device("cuda", i)) for i in range(torch.cuda.device_count())))


def _info(archs: list[str] | None) -> int:
    import torch

    from ..errors import PortattnError
    from ..kernels import backward
    from ..kernels.forward import select
    from ..kernels.variant import DTYPES, HEAD_DIMS
    from ..runtime.cache import DiskCache
    from ..runtime.target import LANES_ENV

    if torch.version.hip:
        runtime = f"HIP {torch.version.hip}"
    else:
        runtime = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"
    print(f"portattn {__version__}, torch {torch.__version__} ({runtime})")
    print(f"cuda-bindings {_package_version('cuda-bindings')}, NVRTC {_compiler_version('cuda')}")
    print(f"hip-python {_package_version('hip-python')}, hiprtc {_compiler_version('hip')}")
    for line in _rocm_toolchains():
        print(line)
    cache = DiskCache()
    print(f"cache: {cache.directory} ({len(cache.entries())} entries, {cache.size_bytes()} bytes)")
    if os.environ.get(LANES_ENV):
        print(f"{LANES_ENV}={os.environ[LANES_ENV]}")
    try:
        targets = _parse_targets(archs)
    except PortattnError as exc:
        print(f"portattn info: {exc}", file=sys.stderr)
        return 2
    if not targets:
        print("target: no GPU (portattn info --arch sm_90 shows the kernel choices for a named arch)")
        return 0
    if not archs:
        names = (torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        print(f"GPU: {', '.join(dict.fromkeys(names))}")
    for target in targets:
        print(f"target: {target}")
        print(f"  lanes: {target.lanes}")
        for dtype in DTYPES:
            for d in HEAD_DIMS:
                try:
                    choice = select(target, dtype, d).label
                except (PortattnError, NotImplementedError, ValueError) as exc:
                    choice = f"unsupported ({exc})"
                print(f"  {dtype} d={d}: {choice}")
                try:
                    plan = backward.select(target, dtype, d)
                    grads = f"{plan.dkdv.label}; deterministic dQ: {plan.dq.label}"
                except (PortattnError, NotImplementedError, ValueError) as exc:
                    grads = f"unsupported ({exc})"
                print(f"  {dtype} d={d}, backward: {grads}")
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _warmup(archs: list[str] | None, jobs: int | None) -> int:
    from ..errors import PortattnError
    from ..runtime.cache import DiskCache
    from .report import report_rows

    try:
        targets = _parse_targets(archs)
    except PortattnError as exc:
        print(f"portattn warmup: {exc}", file=sys.stderr)
        return 2
    if not targets:
        print("portattn warmup: no GPU found; name the archs to compile for, e.g. --arch sm_90", file=sys.stderr)
        return 2
    cache = DiskCache()
    print(f"compiling into {cache.directory}", flush=True)
    status = 0
    for target in targets:
        def progress(n: int, total: int, kernel: CompiledKernel, seconds: float) -> None:
            how = "read from the cache" if kernel.from_disk else "compiled"
            print(f"[{n}/{total}] {target.arch} {kernel.spec.dtype} {kernel.spec.label}: {how} in {seconds:.1f} s",
                  flush=True)

        try:
            report_rows(target, cache, progress, jobs=jobs)
        except (PortattnError, ImportError, OSError) as exc:
            print(f"{target.arch}: skipped: {exc}", flush=True)
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="portattn", description=__doc__)
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("demo", help="check and time attention on the GPU; without one, print the resource report")
    rep = sub.add_parser("report", help="compile every kernel variant and print resources (no GPU needed)")
    rep.add_argument("--arch", default="all", help="sm_80, sm_90, gfx908, gfx90a, gfx942, gfx950, gfx1100, gfx1201 "
                                                   "(any known arch) or all (sm_80, sm_90, gfx90a)")
    rep.add_argument("--rocm", help="AMD archs: the ROCm toolchain to compile with: 'system' (default), a chroot "
                                    "toolchain's name or a ROCm version such as 6.4 (portattn info lists them)")
    b = sub.add_parser("bench", help="portattn vs PyTorch SDPA backends")
    b.add_argument("--dtype", nargs="+", default=["float32"])
    b.add_argument("--head-dim", nargs="+", type=int, default=[64, 128])
    b.add_argument("--seqlen", nargs="+", type=int, default=[4096])
    b.add_argument("--causal", nargs="+", choices=["no", "yes"], default=["no", "yes"])
    b.add_argument("--reps", type=int, default=30)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--json", default="portattn-bench.json")
    b.add_argument("--plot", metavar="PATH.png", help="also plot TFLOP/s vs sequence length (needs matplotlib)")
    b.add_argument("--backward", action="store_true",
                   help="time the backward (and forward+backward, peak memory) instead of the forward")
    b.add_argument("--decode", action="store_true",
                   help="time decoding (one query row per sequence over a KV cache): GPU time per call "
                        "(CUDA graph of back-to-back calls) and eager")
    b.add_argument("--groups", nargs="+", default=["32:8", "8:1"], help="--decode: query heads:key/value heads")
    b.add_argument("--batch", nargs="+", type=int, default=[1, 8, 32], help="--decode: sequences")
    b.add_argument("--keys", nargs="+", type=int, default=[4096, 8192, 65536], help="--decode: keys per sequence")
    b.add_argument("--overhead", action="store_true", help="host cost of one eager call on tiny tensors")
    b.add_argument("--heads", default="16", help="forward / backward: query heads, or HQ:HK for grouped-query "
                                                  "attention (forward only)")
    b.add_argument("--tokens", type=int, default=32768, help="forward / backward: batch times sequence length")
    p = sub.add_parser("plot", help="plot a bench JSON file (no GPU needed; needs matplotlib)")
    p.add_argument("json", help="file written by portattn bench --json")
    p.add_argument("-o", "--output", help="image path (default: the JSON path with .png)")
    info = sub.add_parser("info", help="versions, cache, detected target and kernel choices")
    info.add_argument("--arch", nargs="+", help="show the kernel choices for these archs instead of the GPU's")
    warm = sub.add_parser("warmup", help="compile every kernel variant into the disk cache")
    warm.add_argument("--arch", nargs="+", help="archs to compile for (sm_80, sm_90, gfx90a, ..., all); "
                                                "default: the GPUs of this machine")
    for command in (rep, warm):
        command.add_argument("--jobs", type=_positive, default=None,
                             help="compiler processes (default: one per CPU)")
    cache = sub.add_parser("cache", help="manage the kernel cache")
    cache.add_argument("action", choices=["clear"])
    args = parser.parse_args(argv)
    if args.cmd in (None, "demo"):
        from .demo import demo

        return demo()
    if args.cmd == "report":
        from .report import REPORT_ARCHS, print_report

        return print_report(list(REPORT_ARCHS) if args.arch == "all" else [args.arch], args.rocm, args.jobs)
    if args.cmd == "bench":
        return _bench(args)
    if args.cmd == "plot":
        return _plot(args.json, args.output)
    if args.cmd == "info":
        return _info(args.arch)
    if args.cmd == "warmup":
        return _warmup(args.arch, args.jobs)
    from ..runtime.cache import DiskCache

    cache = DiskCache()
    print(f"removed {cache.clear()} cache entries from {cache.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
