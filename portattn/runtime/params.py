"""Host mirrors of the kernels' launch-parameter structs, generated from their definitions in the CUDA headers.

Each kernel family takes one struct by value (``src_cuda/pa_<family>_params.cuh``). Its ctypes mirror is made here
from the header text, field for field, so the two cannot drift apart: :func:`struct_from_header` reads the
``struct Name { ... };`` block and maps each member's type. Only the types the headers use are accepted, and an
unknown type is an error, never a guess. A test compiles the offsets of every mirror into ``static_assert``s for
both compilers.
"""
from __future__ import annotations

import ctypes
import re

from .sources import read_header


class PaDiv(ctypes.Structure):
    """Host mirror of PaDiv (pa_prelude.cuh): a divisor with the multiplier and shift of pa_div."""
    _fields_ = [("d", ctypes.c_int32), ("mul", ctypes.c_uint32), ("shift", ctypes.c_int32)]


def divisor(d: int) -> PaDiv:
    """PaDiv for ``d`` (1 <= d < 2**31): with shift = ceil(log2 d) and mul = floor(2**32 (2**shift - d) / d) + 1,
    floor(x (2**32 + mul) / 2**(32 + shift)) is x // d for every 0 <= x < 2**31 (the error term stays below 1 / d)."""
    if not 1 <= d < 2**31:
        raise ValueError(f"divisor: expected 1 <= d < 2**31, got {d}")
    shift = (d - 1).bit_length()
    return PaDiv(d, (2**32 * (2**shift - d)) // d + 1, shift)


# Member types of the parameter structs and their ctypes equivalents (device pointers are plain addresses).
CTYPES: dict[str, type] = {
    "int": ctypes.c_int32,
    "unsigned": ctypes.c_uint32,
    "float": ctypes.c_float,
    "pa_i64": ctypes.c_int64,
    "pointer": ctypes.c_void_p,
    "PaTensorMap": ctypes.c_uint64 * 16,  # 128 bytes, aligned to 64 on the device (see struct_from_header)
    "PaDiv": PaDiv,
}
_MAP_ALIGN = 64  # alignas of PaTensorMap
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_MEMBER = re.compile(r"^(?:const\s+)?(\w+)\s*(\*?)\s*(.+)$", re.S)
_NAME = re.compile(r"\*?\s*([A-Za-z_]\w*)$")


def struct_fields(header_text: str, name: str) -> list[tuple[str, str]]:
    """[(member, type)] of ``struct name { ... };`` in ``header_text``; pointer members have type "pointer"."""
    text = _COMMENT.sub("", header_text)
    match = re.search(r"\bstruct\s+" + re.escape(name) + r"\s*\{(.*?)\};", text, re.S)
    if match is None:
        raise ValueError(f"struct {name} not found in the header")
    fields: list[tuple[str, str]] = []
    for decl in filter(None, (d.strip() for d in match.group(1).split(";"))):
        m = _MEMBER.match(decl)
        if m is None:
            raise ValueError(f"struct {name}: cannot read the member declaration {decl!r}")
        base, star, names = m.groups()
        for part in names.split(","):
            part = part.strip()
            n = _NAME.fullmatch(part)
            if n is None:
                raise ValueError(f"struct {name}: cannot read the member name in {decl!r}")
            kind = "pointer" if star or part.startswith("*") else base
            if kind not in CTYPES:
                raise ValueError(f"struct {name}: member {n.group(1)} has type {base}, which has no host mirror "
                                 f"(known: {', '.join(CTYPES)})")
            fields.append((n.group(1), kind))
    return fields


def struct_from_header(header: str, name: str) -> type[ctypes.Structure]:
    """A ctypes Structure laid out as ``struct name`` of the CUDA header ``header`` (e.g. "pa_fwd_params.cuh")."""
    members = struct_fields(read_header(header), name)
    fields = [(member, CTYPES[kind]) for member, kind in members]
    mirror = type(name, (ctypes.Structure,), {"_fields_": fields, "__doc__": f"Host mirror of {name} ({header})."})
    if any(kind == "PaTensorMap" for _, kind in members):
        # ctypes aligns to at most 8 bytes: the maps must come first (offsets multiples of 64 without padding), and
        # the size is rounded up to 64 as the device's is.
        for member, kind in members:
            if kind == "PaTensorMap" and getattr(mirror, member).offset % _MAP_ALIGN:
                raise ValueError(f"struct {name}: tensor map {member} must come before every other member")
        tail = -ctypes.sizeof(mirror) % _MAP_ALIGN
        if tail:
            mirror = type(name, (ctypes.Structure,), {"_fields_": fields + [("_tail", ctypes.c_uint8 * tail)],
                                                      "__doc__": mirror.__doc__})
    return mirror
