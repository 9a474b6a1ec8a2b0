"""The pure-Python MessagePack decoder and ELF note reader behind the AMDGPU metadata (no ROCm needed)."""
from __future__ import annotations

import math
import struct

import pytest

from portattn.runtime.amdgpu_metadata import (
    MsgpackError,
    kernel_metadata,
    kernels,
    msgpack_unpack,
    read_metadata,
    target_arch,
)


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"\xc0", None),
        (b"\xc2", False),
        (b"\xc3", True),
        (b"\x00", 0),
        (b"\x7f", 127),
        (b"\xff", -1),
        (b"\xe0", -32),
        (b"\xcc\xff", 255),
        (b"\xcd\x01\x00", 256),
        (b"\xce\x00\x01\x00\x00", 65536),
        (b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 2**64 - 1),
        (b"\xd0\x80", -128),
        (b"\xd1\x80\x00", -32768),
        (b"\xd2\x80\x00\x00\x00", -(2**31)),
        (b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00", -(2**63)),
        (b"\xca\x3f\xc0\x00\x00", 1.5),
        (b"\xcb\x40\x09\x21\xfb\x54\x44\x2d\x18", math.pi),
        (b"\xa0", ""),
        (b"\xa3abc", "abc"),
        (b"\xd9\x03xyz", "xyz"),
        (b"\xda\x00\x02\xc3\xa9", "\u00e9"),
        (b"\xdb\x00\x00\x00\x01q", "q"),
        (b"\xc4\x02\x00\x01", b"\x00\x01"),
        (b"\xc5\x00\x01\xaa", b"\xaa"),
        (b"\xc6\x00\x00\x00\x00", b""),
        (b"\x90", []),
        (b"\x93\x01\xa1a\xc0", [1, "a", None]),
        (b"\xdc\x00\x02\xc2\xc3", [False, True]),
        (b"\xdd\x00\x00\x00\x01\x05", [5]),
        (b"\x80", {}),
        (b"\x82\xa1a\x01\xa1b\x92\x02\x03", {"a": 1, "b": [2, 3]}),
        (b"\xde\x00\x01\x01\xa1x", {1: "x"}),
        (b"\xdf\x00\x00\x00\x01\xa1k\x81\xa1n\xc3", {"k": {"n": True}}),
        (b"\x81\x92\x01\x02\xa1v", {(1, 2): "v"}),
        (b"\xd4\x05\xaa", ("ext", 5, b"\xaa")),
        (b"\xc7\x02\xfe\x01\x02", ("ext", -2, b"\x01\x02")),
    ],
)
def test_msgpack_decodes_every_type(data, expected):
    assert msgpack_unpack(data) == expected


def test_msgpack_wide_lengths():
    s = "x" * 300
    assert msgpack_unpack(b"\xda" + struct.pack(">H", 300) + s.encode()) == s
    arr = msgpack_unpack(b"\xdc" + struct.pack(">H", 20) + bytes(range(20)))
    assert arr == list(range(20))
    m = msgpack_unpack(b"\xde" + struct.pack(">H", 16) + b"".join(bytes([0xA1, 0x61 + i, i]) for i in range(16)))
    assert m == {chr(0x61 + i): i for i in range(16)}


@pytest.mark.parametrize("data", [b"", b"\xa3ab", b"\x92\x01", b"\xcd\x01", b"\xc1", b"\x01\x02"])
def test_msgpack_rejects_malformed(data):
    with pytest.raises(MsgpackError):
        msgpack_unpack(data)


# ---- a synthetic code object: an ELF64 with one .note section carrying an AMDGPU metadata note -----------------

def _pack(v) -> bytes:
    """A minimal MessagePack encoder for building test notes."""
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        return bytes([v]) if 0 <= v < 128 else b"\xce" + struct.pack(">I", v)
    if isinstance(v, str):
        raw = v.encode()
        return bytes([0xA0 | len(raw)]) + raw if len(raw) < 32 else b"\xd9" + bytes([len(raw)]) + raw
    if isinstance(v, list):
        return bytes([0x90 | len(v)]) + b"".join(_pack(x) for x in v)
    if isinstance(v, dict):
        return bytes([0x80 | len(v)]) + b"".join(_pack(k) + _pack(x) for k, x in v.items())
    raise TypeError(v)


def _note(name: bytes, ntype: int, desc: bytes) -> bytes:
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    return struct.pack("<III", len(name), len(desc), ntype) + pad(name) + pad(desc)


def _elf_with_notes(notes: bytes) -> bytes:
    ehdr_size, shentsize = 64, 64
    notes_off = ehdr_size
    shoff = notes_off + len(notes)
    header = bytearray(ehdr_size)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<QQ", header, 0x20, 0, shoff)
    struct.pack_into("<HHHH", header, 0x36, 56, 0, shentsize, 2)
    null_sh = bytes(shentsize)
    note_sh = struct.pack("<IIQQQQIIQQ", 0, 7, 2, 0, notes_off, len(notes), 0, 0, 4, 0)
    return bytes(header) + notes + null_sh + note_sh


META = {
    "amdhsa.version": [1, 1],
    "amdhsa.target": "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-",
    "amdhsa.kernels": [
        {".name": "first", ".symbol": "first.kd", ".vgpr_count": 40, ".wavefront_size": 64},
        {".name": "second", ".symbol": "second.kd", ".vgpr_count": 200, ".group_segment_fixed_size": 70000},
    ],
}


def test_reads_metadata_note_among_others():
    notes = _note(b"GNU", 3, b"\x01\x02\x03\x04\x05") + _note(b"AMDGPU", 32, _pack(META))
    binary = _elf_with_notes(notes)
    assert read_metadata(binary) == META
    assert [k[".name"] for k in kernels(binary)] == ["first", "second"]
    assert kernel_metadata(binary, "second")[".vgpr_count"] == 200
    assert kernel_metadata(binary, "first.kd")[".vgpr_count"] == 40
    assert target_arch(binary) == "gfx90a"
    with pytest.raises(KeyError, match="first"):
        kernel_metadata(binary, "third")


def test_missing_note_and_non_elf():
    with pytest.raises(ValueError, match="NT_AMDGPU_METADATA"):
        read_metadata(_elf_with_notes(_note(b"AMDGPU", 1, b"\0" * 8)))
    with pytest.raises(ValueError, match="ELF"):
        read_metadata(b"not an elf at all, clearly")
