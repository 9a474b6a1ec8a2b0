"""Repeated eager calls: a call of ``portattn.attention``, of the SDPA route or of ``attention_with_kvcache``
(ops/kvcache.py) whose signature (shapes, strides, dtypes, devices, options, target settings) ran before on plain
tensors, launching the kernels on its inputs directly, launches the same kernels again, without the checks, the
layout work and the kernel choice. A training call (inputs that need gradients) replays its forward's launches, and
its backward those of the first backward with the same layout of the output's gradient. The host cost of one call
matters when decoding (one call per layer per token) and in small training steps. One store holds the launches of
every kind of call, under keys of their own."""
from typing import Callable, Optional

import torch

from ..kernels.variant import KERNEL_ENV, NO_OVERRIDES, OVERRIDES
from ..runtime import environ, loader
from ..runtime.target import LANES_ENV

# Launches a call again on new tensors of its signature (only their addresses are read), giving the output: for
# ``attention`` and the SDPA route fn(q, k, v, out), which writes into ``out`` when given (else into a new tensor;
# a training call's replay also records its backward); for ``attention_with_kvcache`` its own arguments.
Replay = Callable[..., object]
_replays: dict[tuple, Replay] = {}
# Replays that serve their calls with keys of any length (the decode launches of ``attention`` and the SDPA route),
# under ``any_length``'s key: a cache that grows by one key per generated token gives each step's first call a new
# signature, which then takes one of these instead of the checked path.
_any_length: dict[tuple, Replay] = {}


# Whether torch.func's transforms (grad, vmap) wrap the tensors: their calls take the operators.
functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def plain(tensors: tuple, aligned: tuple, training: bool = False) -> bool:
    """Whether a call on ``tensors`` may replay: plain tensors (that need no gradient, unless ``training``), not
    while tracing or under torch.func's transforms, and those of ``aligned`` at 16-byte aligned addresses (the
    kernels read them in place)."""
    if torch.compiler.is_compiling() or functorch_active():
        return False
    grad = not training and torch.is_grad_enabled()
    for t in tensors:  # loops rather than any(...): this runs on every eager call
        if type(t) is not torch.Tensor or (grad and t.requires_grad):
            return False
    for t in aligned:
        if t.data_ptr() & 15:
            return False
    return True


def signature(q: object, k: object, v: object, causal: object, scale: object, gqa: object,
              out: object = None, deterministic: object = None, options: tuple = ()) -> Optional[tuple]:
    """The key of an ``attention`` or SDPA call that may replay an earlier one (``plain`` tensors, a bool
    ``causal``, a float or None ``scale``; ``out``: the tensor given to receive the output, or None; ``options``:
    the call's other options, hashable, empty for none); else None. A call that needs gradients (no ``out``) is a
    training call: its key holds which inputs need them and whether the backward is ``deterministic`` (None: as
    torch's setting is now)."""
    if type(causal) is not bool or not (scale is None or type(scale) is float) or not plain((q, k, v), (q, k, v),
                                                                                          training=True):
        return None
    # any_length replaces entries 1, 2, 4 and 5 (k's and v's shapes and strides)
    key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
           k.device, v.device, causal, scale, gqa, options, *settings())
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        if out is not None or not (deterministic is None or type(deterministic) is bool):
            return None  # the checks refuse out= here, and a deterministic that is not a bool
        if deterministic is None:
            deterministic = torch.are_deterministic_algorithms_enabled()
        return key + (q.requires_grad, k.requires_grad, v.requires_grad, deterministic)
    if out is None:
        return key
    if not plain((out,), (out,)):
        return None
    return key + (out.shape, out.stride(), out.dtype, out.device)


def settings() -> tuple:
    """What a signature holds besides the call: the verification overrides (None for none: hashing the dataclass
    costs more than the rest of a lookup) and the target and kernel settings of the environment."""
    overrides = OVERRIDES.get()
    return None if overrides is NO_OVERRIDES else overrides, environ.get(LANES_ENV), environ.get(KERNEL_ENV)


def in_kernel_layout(t: torch.Tensor) -> bool:
    """Whether the kernels can use the 4-D ``t`` in place: unit stride along head_dim and 16-byte aligned rows."""
    stride, shape, per_16_bytes = t.stride(), t.shape, 16 // t.element_size()
    return (stride[3] == 1 and t.data_ptr() % 16 == 0 and (shape[0] == 1 or stride[0] % per_16_bytes == 0)
            and (shape[1] == 1 or stride[1] % per_16_bytes == 0) and (shape[2] == 1 or stride[2] % per_16_bytes == 0))


def any_length(key: tuple, k: torch.Tensor, v: torch.Tensor) -> Optional[tuple]:
    """The key shared by the calls whose ``signature`` differs from ``key`` (of a call on ``k``, ``v``) only in the
    length and strides of k and v; None when k and v are not both of one length of at least one key and in kernel
    layout (read in place)."""
    if k.shape[2] == 0 or v.shape[2] != k.shape[2] or not (in_kernel_layout(k) and in_kernel_layout(v)):
        return None
    return (key[0], k.shape[:2], k.shape[3], v.shape[:2], v.shape[3], key[3]) + key[6:]


def replay(q: object, k: object, v: object, causal: object, scale: object, gqa: object, out: object = None,
           deterministic: object = None, options: tuple = ()) -> tuple[Optional[tuple], Optional[torch.Tensor]]:
    """``(key, out)``: the call's ``signature`` (None when it may not replay) and, when a call of that signature ran
    before (or a call that takes keys of any length, ``remember_any_length``, of its ``any_length`` key), its output
    on q, k, v, in ``out`` when given (else None: the caller takes the checked path and remembers its launches under
    the key)."""
    key = signature(q, k, v, causal, scale, gqa, out, deterministic, options)
    fn = lookup(key)
    if fn is None:
        if key is None or not _any_length:
            return key, None
        family = any_length(key, k, v)  # type: ignore[arg-type]
        fn = None if family is None else _any_length.get(family)
        if fn is None:
            return key, None
        remember(key, fn)
    if out is None:
        return key, fn(q, k, v, None)
    written(out)
    fn(q, k, v, out)
    return key, out


def written(out: torch.Tensor) -> None:
    """Count a write into ``out`` made without the operator (which counts its own): autograd then sees it. A tensor
    made under ``torch.inference_mode`` has no version counter (some torch versions raise when asked to bump it)."""
    if not out.is_inference():
        torch.autograd.graph.increment_version(out)


def lookup(key: Optional[tuple]) -> Optional[Replay]:
    """The launches remembered under ``key`` (None: none, or no key)."""
    return None if key is None else _replays.get(key)


def remember(key: tuple, fn: Replay) -> None:
    loader.remember(_replays, key, fn)


def remember_any_length(key: tuple, k: torch.Tensor, v: torch.Tensor, fn: Replay) -> None:
    """Keep ``fn``, which serves the calls of ``key`` (on ``k``, ``v``) with keys of any length, for all of those
    (``any_length``)."""
    family = any_length(key, k, v)
    if family is not None:
        loader.remember(_any_length, family, fn)


def forget() -> None:
    """Drop every remembered launch: later calls take the checked path once again."""
    _replays.clear()
    _any_length.clear()
