"""Kernel families: per family its tile tables (data), the variant choice, the host mirror of its parameter struct
and its launch. ``variant.py`` holds what they share."""
from __future__ import annotations

from ..runtime.target import Target
from . import backward, decode, forward
from .variant import KernelSpec


def shipped_variants(target: Target) -> list[KernelSpec]:
    """Every variant of every family that portattn can use on ``target``."""
    return [*forward.shipped_variants(target), *backward.shipped_variants(target), *decode.shipped_variants(target)]
