"""Running the forward kernel on torch tensors: target, variant, compiled module, parameters, launch."""
from __future__ import annotations

import os
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable

import torch

from .compile import compile_kernel
from .driver import driver_for
from .errors import UnsupportedTargetError
from .launch_params import FwdParams
from .select import KernelSpec, dtype_name, select
from .target import LANES_ENV, Target

_targets: dict[tuple[int, str], Target] = {}
_functions: dict[tuple[int, Target, KernelSpec], object] = {}
_lock = threading.Lock()
KERNEL_ENV = "PORTATTN_KERNEL"


@dataclass(frozen=True)
class Overrides:
    """Verification hooks (portattn.testing): a forced target, a forced kernel ("mma" / "simt") and a
    transformation of the selected variant."""

    target: Target | None = None
    kernel: str | None = None
    tweak: Callable[[KernelSpec], KernelSpec] | None = None


OVERRIDES: ContextVar[Overrides] = ContextVar("portattn_overrides", default=Overrides())


def target_for(device: torch.device) -> Target:
    """The (cached) target of a torch GPU device, honouring ``PORTATTN_LANES``."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, os.environ.get(LANES_ENV, ""))
    with _lock:
        target = _targets.get(key)
    if target is None:
        target = Target.detect(torch.device("cuda", index))
        with _lock:
            _targets[key] = target
    return target


def _function(target: Target, spec: KernelSpec, device_index: int):
    """The loaded kernel; compiled (or read from the cache) and loaded once per device and variant, so the
    per-call path does no file reading or hashing."""
    key = (device_index, target, spec)
    with _lock:
        fn = _functions.get(key)
    if fn is None:
        compiled = compile_kernel(spec, target)
        fn = driver_for(target.vendor).load(compiled.binary, device_index).function(spec.function)
        with _lock:
            _functions[key] = fn
    return fn


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    """Element strides of dims 0..2; a size-1 dim gets stride 0 (it is never stepped)."""
    return tuple(0 if t.shape[i] == 1 else t.stride(i) for i in range(3))  # type: ignore[return-value]


def run_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None,
                causal: bool, scale: float) -> None:
    """Launch the forward kernel. Inputs are validated, non-empty and in a layout the kernel takes."""
    target = target_for(q.device)
    hooks = OVERRIDES.get()
    if hooks.target is not None:
        if (hooks.target.vendor, hooks.target.arch) != (target.vendor, target.arch):
            raise UnsupportedTargetError(f"target {hooks.target} cannot run on this device ({target})")
        target = hooks.target
    spec = select(target, dtype_name(q.dtype), q.shape[-1], hooks.kernel or os.environ.get(KERNEL_ENV) or None,
                  q.shape[2])
    if hooks.tweak is not None:
        spec = hooks.tweak(spec)
    fn = _function(target, spec, q.device.index)
    batch, heads_q, seqlen_q, _ = q.shape
    _, heads_kv, seqlen_k, _ = k.shape
    num_m_blocks = -(-seqlen_q // spec.tile.block_m)
    blocks = num_m_blocks * batch * heads_q
    if blocks >= 2**31:
        raise ValueError(f"problem too large: {blocks} blocks (batch * heads * query blocks must be < 2**31)")
    p = FwdParams(
        q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=out.data_ptr(),
        lse=lse.data_ptr() if lse is not None else None,
        batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
        causal=int(causal), scale_log2=scale * 1.4426950408889634, num_m_blocks=num_m_blocks,
    )
    for name, t in (("q", q), ("k", k), ("v", v), ("o", out)):
        sb, sh, sn = _strides(t)
        setattr(p, f"{name}_sb", sb)
        setattr(p, f"{name}_sh", sh)
        setattr(p, f"{name}_sn", sn)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    grid = spec.grid_blocks(blocks, target.multiprocessors)
    driver_for(target.vendor).launch(fn, (grid, 1, 1), (spec.tile.threads, 1, 1), spec.smem_bytes, p, stream)
