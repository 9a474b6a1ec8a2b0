"""Verification hooks: run the kernels for a chosen target, a chosen kernel, or a modified kernel variant.

For tests and kernel authors, not for production use. The hooks apply to the calls made inside the ``with``
block, in the current thread or task only, and nest. The backward of a call made inside the block runs under the
call's hooks too (autograd runs it on a thread of its own), except in a ``torch.compile``d graph, whose backward
runs the operator without them (``PORTATTN_LANES=64`` selects the wave64 emulation for every thread).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence, TypeVar

import torch

from ..kernels.variant import OVERRIDES, KernelSpec
from ..runtime.target import Target

KERNELS = ("mma", "simt")  # the implementations every family has
FULL_MATRIX_ENV = "PORTATTN_FULL_MATRIX"
Spec = TypeVar("Spec", bound=KernelSpec)


@contextmanager
def _overriding(**fields: object) -> Iterator[None]:
    token = OVERRIDES.set(replace(OVERRIDES.get(), **fields))
    try:
        yield
    finally:
        OVERRIDES.reset(token)


@contextmanager
def use_target(target: Target) -> Iterator[Target]:
    """Run attention calls for ``target`` (one of ``portattn.available_targets()``), e.g. the wave64 emulation,
    instead of the device's default target."""
    if not isinstance(target, Target):
        raise TypeError(f"target must be a portattn Target, got {type(target).__name__}")
    with _overriding(target=target):
        yield target


@contextmanager
def use_kernel(kernel: str) -> Iterator[str]:
    """Run attention calls on ``kernel``: "mma" (matrix units) or "simt" (float32 only), like the
    ``PORTATTN_KERNEL`` environment variable."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    with _overriding(kernel=kernel):
        yield kernel


@contextmanager
def tweak_variant(tweak: Callable[[KernelSpec], KernelSpec]) -> Iterator[None]:
    """Replace each selected kernel variant (the forward's, and each of a backward's kernels) by
    ``tweak(variant)``: other tile shapes, or test-only defines such as the planted wave32 bug of the sensitivity
    test."""
    with _overriding(tweak=tweak):
        yield


def capture_graph(fn: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
    """A CUDA graph of one call of ``fn`` and the call's (static) result. ``fn`` runs once first on a side stream,
    so that kernels are compiled and loaded before the capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    return graph, result


def full_matrix() -> bool:
    """Whether compile checks take every shipped variant (``PORTATTN_FULL_MATRIX=1``) or a sample of them."""
    return os.environ.get(FULL_MATRIX_ENV) == "1"


def compile_sample(specs: Sequence[Spec], rotation: int = 0, by_dtype: bool = True) -> list[Spec]:
    """The variants of ``specs`` that a routine test run compiles, in their order: every variant with
    ``PORTATTN_FULL_MATRIX=1``, else one per kernel function (and dtype, with ``by_dtype``).

    The one is counted from the end of its group in ``specs``' order, where the largest head dim and the extended
    masks (the most registers and shared memory) come last: rotation 0 takes the last, rotation r the (3r+1)-th
    from the end, so that callers with different rotations cover different head dims and tiles."""
    if full_matrix():
        return list(specs)
    groups: dict[tuple[str, str], list[Spec]] = {}
    for spec in specs:
        groups.setdefault((spec.function, spec.dtype if by_dtype else ""), []).append(spec)
    picked = {id(group[(-1 - 3 * rotation) % len(group)]) for group in groups.values()}
    return [spec for spec in specs if id(spec) in picked]
