"""Resource report: every shipped kernel variant compiled for a target arch, with its resources and occupancy.

Works without a GPU: it only compiles.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .compile import CompiledKernel, compile_kernel
from .compile.cache import DiskCache
from .resources import Resources, amd_waves_per_simd, nvidia_blocks_per_sm
from .select import SHORT_SEQLEN, KernelSpec, select, shipped_variants
from .target import Target

REPORT_ARCHS = ("sm_80", "sm_90", "gfx90a")


@dataclass
class ReportRow:
    arch: str
    spec: KernelSpec
    resources: Resources
    occupancy: str
    short_only: bool = False  # the variant of sequences of at most SHORT_SEQLEN queries


def occupancy(res: Resources, spec: KernelSpec, target: Target) -> str:
    if target.vendor == "hip":
        return f"{amd_waves_per_simd(res, spec)} waves/SIMD"
    return f"{nvidia_blocks_per_sm(res, spec, target)} blocks/SM"


def report_rows(target: Target, cache: DiskCache | None = None,
                progress: Callable[[int, int, CompiledKernel, float], None] | None = None) -> list[ReportRow]:
    """Compile (or read from the cache) every shipped variant for ``target``. ``progress(n, total, kernel,
    seconds)`` is called after each variant, ``n`` counting from 1."""
    rows = []
    specs = shipped_variants(target)
    for n, spec in enumerate(specs, 1):
        start = time.perf_counter()
        kernel = compile_kernel(spec, target, cache)
        if progress is not None:
            progress(n, len(specs), kernel, time.perf_counter() - start)
        res = kernel.resources
        rows.append(ReportRow(target.arch, spec, res, occupancy(res, spec, target),
                              spec != select(target, spec.dtype, spec.head_dim, spec.kernel)))
    return rows


def format_rows(rows: list[ReportRow]) -> str:
    head = ["arch", "kernel", "dtype", "d", "tile", "threads", "regs (VGPR+AGPR)", "smem/LDS bytes", "spill", "scratch",
            "occupancy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        regs = str(r.resources.registers) + (f" ({r.resources.agprs} AGPR)" if r.resources.agprs else "")
        tile = ", ".join([f"{r.spec.tile.block_m}x{r.spec.tile.block_n}", *r.spec.tile_options])
        tile += f" (at most {SHORT_SEQLEN} queries)" * r.short_only
        cells = [r.arch, r.spec.function, r.spec.dtype, str(r.spec.head_dim), tile,
                 str(r.spec.tile.threads), regs, str(r.resources.static_smem + r.spec.smem_bytes),
                 str(r.resources.spill_bytes), str(r.resources.scratch_bytes), r.occupancy]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
