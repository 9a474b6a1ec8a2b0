"""Resource report: every shipped kernel variant compiled for a target arch, with its resources and occupancy.

Works without a GPU: it only compiles.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..errors import PortattnError
from ..kernels import shipped_variants
from ..kernels.variant import KernelSpec
from ..runtime.cache import DiskCache
from ..runtime.compiler import CompiledKernel, compile_kernel
from ..runtime.resources import Resources, occupancy
from ..runtime.target import Target

if TYPE_CHECKING:
    from ..runtime.toolchains import Toolchain

REPORT_ARCHS = ("sm_80", "sm_90", "gfx90a")


@dataclass
class ReportRow:
    arch: str
    spec: KernelSpec
    resources: Resources
    occupancy: str


def _compile_timed(spec: KernelSpec, target: Target, cache: DiskCache,
                   toolchain: Toolchain | None) -> tuple[CompiledKernel, float]:
    start = time.perf_counter()
    kernel = compile_kernel(spec, target, cache, toolchain)
    return kernel, time.perf_counter() - start


def report_rows(target: Target, cache: DiskCache | None = None,
                progress: Callable[[int, int, CompiledKernel, float], None] | None = None,
                toolchain: Toolchain | None = None, jobs: int | None = None) -> list[ReportRow]:
    """Compile (or read from the cache) every shipped variant of every family for ``target``, with ``toolchain``
    (AMD only; default: the system's compiler), in ``jobs`` processes (None: one per CPU this process may run on;
    1: in this one, in order; more start new Python processes, so a script that calls this needs the
    ``if __name__ == "__main__":`` guard).
    ``progress(n, total, kernel, seconds)`` is called after each variant, ``n`` counting from 1 in the order they
    finish."""
    specs = shipped_variants(target)
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cache = cache if cache is not None else DiskCache()
    kernels: dict[int, CompiledKernel] = {}

    def done(i: int, kernel: CompiledKernel, seconds: float) -> None:
        kernels[i] = kernel
        if progress is not None:
            progress(len(kernels), len(specs), kernel, seconds)

    if jobs <= 1:
        for i, spec in enumerate(specs):
            done(i, *_compile_timed(spec, target, cache, toolchain))
    else:
        # New processes rather than forks: the caller may hold a GPU context or threads.
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_compile_timed, spec, target, cache, toolchain): i
                       for i, spec in enumerate(specs)}
            try:
                for future in as_completed(futures):
                    done(futures[future], *future.result())
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
    rows = []
    for i, spec in enumerate(specs):
        res = kernels[i].resources
        rows.append(ReportRow(target.arch, spec, res, occupancy(res, spec.block_threads, spec.smem_bytes, target)))
    return rows


def format_rows(rows: list[ReportRow]) -> str:
    head = ["arch", "kernel", "dtype", "d", "tile", "threads", "regs (VGPR+AGPR)", "smem/LDS bytes", "spill", "scratch",
            "occupancy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        regs = str(r.resources.registers) + (f" ({r.resources.agprs} AGPR)" if r.resources.agprs else "")
        tile = ", ".join([f"{r.spec.tile.block_m}x{r.spec.tile.block_n}", *r.spec.options])
        cells = [r.arch, r.spec.function, r.spec.dtype, str(r.spec.head_dim), tile,
                 str(r.spec.block_threads), regs, str(r.resources.static_smem + r.spec.smem_bytes),
                 str(r.resources.spill_bytes), str(r.resources.scratch_bytes), r.occupancy]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_report(archs: list[str], rocm: str | None = None, jobs: int | None = None) -> int:
    """Print the report of each arch (AMD ones compiled with the ROCm toolchain ``rocm``: None or "system" for this
    machine's, else a toolchain name or a ROCm version), compiling in ``jobs`` processes (as ``report_rows``);
    returns 1 when one could not be made (its error is printed), else 0."""
    status = 0
    for arch in archs:
        try:
            target = Target.for_arch(arch)
            toolchain = None
            heading = arch
            if target.vendor == "hip":
                from ..runtime.toolchains import find_toolchain

                toolchain = find_toolchain(rocm)
                heading += f" (hiprtc of {toolchain.label}: {toolchain.version()})"
            elif rocm is not None:
                raise ValueError(f"--rocm applies to AMD archs only, not {arch}")
            print(f"\n## {heading}", flush=True)
            print(format_rows(report_rows(target, toolchain=toolchain, jobs=jobs)), flush=True)
        except (PortattnError, ImportError, OSError, ValueError) as exc:
            print(f"\n## {arch}\nskipped: {exc}")
            status = 1
    return status
