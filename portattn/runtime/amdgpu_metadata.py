"""Reading an AMDGPU code object (ELF) offline: the NT_AMDGPU_METADATA note, and disassembly.

The metadata note (type 32, owner ``"AMDGPU"``) holds a MessagePack map with ``amdhsa.target`` and
``amdhsa.kernels``: one map per kernel with ``.name``, ``.symbol``, ``.vgpr_count``, ``.agpr_count``,
``.sgpr_count``, ``.group_segment_fixed_size`` (static LDS), ``.private_segment_fixed_size`` (scratch),
``.vgpr_spill_count``, ``.sgpr_spill_count``, ``.wavefront_size``... Pure Python, no dependencies.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Any

NT_AMDGPU_METADATA = 32
_SHT_NOTE = 7
_PT_NOTE = 4


class MsgpackError(ValueError):
    """Malformed or truncated MessagePack data."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise MsgpackError(f"truncated at offset {self.pos}: need {n} more bytes")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(">" + fmt, self.take(struct.calcsize(">" + fmt)))[0]


_FIXED = {0xC0: None, 0xC2: False, 0xC3: True}
_NUMBERS = {0xCA: "f", 0xCB: "d", 0xCC: "B", 0xCD: "H", 0xCE: "I", 0xCF: "Q",
            0xD0: "b", 0xD1: "h", 0xD2: "i", 0xD3: "q"}
_LENGTHS = {0xC4: "B", 0xC5: "H", 0xC6: "I", 0xD9: "B", 0xDA: "H", 0xDB: "I",
            0xDC: "H", 0xDD: "I", 0xDE: "H", 0xDF: "I", 0xC7: "B", 0xC8: "H", 0xC9: "I"}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


def _decode(r: _Reader) -> Any:
    b = r.take(1)[0]
    if b <= 0x7F:
        return b
    if b >= 0xE0:
        return b - 0x100
    if 0xA0 <= b <= 0xBF:
        return r.take(b & 0x1F).decode("utf-8")
    if 0x90 <= b <= 0x9F:
        return [_decode(r) for _ in range(b & 0x0F)]
    if 0x80 <= b <= 0x8F:
        return _decode_map(r, b & 0x0F)
    if b in _FIXED:
        return _FIXED[b]
    if b in _NUMBERS:
        return r.unpack(_NUMBERS[b])
    if b in _FIXEXT:
        return ("ext", r.unpack("b"), r.take(_FIXEXT[b]))
    if b in _LENGTHS:
        n = r.unpack(_LENGTHS[b])
        if b <= 0xC6:
            return r.take(n)
        if b <= 0xC9:
            return ("ext", r.unpack("b"), r.take(n))
        if b <= 0xDB:
            return r.take(n).decode("utf-8")
        if b <= 0xDD:
            return [_decode(r) for _ in range(n)]
        return _decode_map(r, n)
    raise MsgpackError(f"invalid MessagePack type byte 0x{b:02x} at offset {r.pos - 1}")


def _decode_map(r: _Reader, n: int) -> dict:
    out = {}
    for _ in range(n):
        key = _hashable(_decode(r))
        out[key] = _decode(r)
    return out


def msgpack_unpack(data: bytes) -> Any:
    """Decode one MessagePack value that spans all of ``data``.

    nil/bool/int/float/str/bin/array/map as Python values (bin -> bytes, array keys -> tuples), ext types as
    ``("ext", type, bytes)``.
    """
    r = _Reader(data)
    value = _decode(r)
    if r.pos != len(data):
        raise MsgpackError(f"{len(data) - r.pos} trailing bytes after the MessagePack value")
    return value


def _elf_notes(binary: bytes):
    """Yield (owner, type, desc) of every ELF note (64-bit little-endian objects, as AMDGPU uses)."""
    if binary[:4] != b"\x7fELF" or binary[4] != 2 or binary[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF object")
    phoff, shoff = struct.unpack_from("<QQ", binary, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", binary, 0x36)
    regions = []
    for i in range(shnum):
        sh_type, = struct.unpack_from("<I", binary, shoff + i * shentsize + 4)
        offset, size, align = struct.unpack_from("<QQ8xQ", binary, shoff + i * shentsize + 0x18)
        if sh_type == _SHT_NOTE:
            regions.append((offset, size, align))
    if not regions:
        for i in range(phnum):
            p_type, = struct.unpack_from("<I", binary, phoff + i * phentsize)
            offset, = struct.unpack_from("<Q", binary, phoff + i * phentsize + 8)
            size, = struct.unpack_from("<Q", binary, phoff + i * phentsize + 32)
            align, = struct.unpack_from("<Q", binary, phoff + i * phentsize + 48)
            if p_type == _PT_NOTE:
                regions.append((offset, size, align))
    for offset, size, align in regions:
        pad = 8 if align == 8 else 4
        pos, end = offset, offset + size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", binary, pos)
            pos += 12
            name = binary[pos : pos + namesz].rstrip(b"\0").decode(errors="replace")
            pos += -(-namesz // pad) * pad
            desc = binary[pos : pos + descsz]
            pos += -(-descsz // pad) * pad
            yield name, ntype, desc


def read_metadata(binary: bytes) -> dict:
    """The decoded NT_AMDGPU_METADATA map of a code object."""
    for name, ntype, desc in _elf_notes(binary):
        if name == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
            return msgpack_unpack(desc)
    raise ValueError("no NT_AMDGPU_METADATA note in this code object (code object v3 or later expected)")


def kernels(binary: bytes) -> list[dict]:
    """One metadata map per kernel of the code object."""
    return list(read_metadata(binary).get("amdhsa.kernels", []))


def kernel_metadata(binary: bytes, name: str) -> dict:
    """The metadata map of the kernel called ``name`` (its ``.name`` or ``.symbol``, with or without ``.kd``)."""
    found = kernels(binary)
    for k in found:
        if name in (k.get(".name"), k.get(".symbol"), str(k.get(".symbol", "")).removesuffix(".kd")):
            return k
    raise KeyError(f"no kernel {name!r} in the code object; it has {[k.get('.name') for k in found]}")


def target_arch(binary: bytes) -> str | None:
    """The processor the code object is built for (``"gfx90a"``), from ``amdhsa.target``."""
    target = read_metadata(binary).get("amdhsa.target")
    return target.split("--", 1)[-1].split(":")[0] if isinstance(target, str) else None


def objdump_tool() -> str | None:
    """An llvm-objdump that can disassemble AMDGPU, if one is installed."""
    for cand in ("llvm-objdump-15", "llvm-objdump", "/opt/rocm/llvm/bin/llvm-objdump"):
        path = shutil.which(cand)
        if path:
            return path
    return None


def disassemble(binary: bytes, arch: str | None = None) -> str | None:
    """``llvm-objdump -d --mcpu=<arch>`` of the code object, or None when no llvm-objdump is installed."""
    tool = objdump_tool()
    if tool is None:
        return None
    arch = arch or target_arch(binary)
    with tempfile.TemporaryDirectory(prefix="portattn-co-") as tmp:
        path = Path(tmp) / "kernel.co"
        path.write_bytes(binary)
        cmd = [tool, "-d", *([f"--mcpu={arch}"] if arch else []), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.strip()}")
    return proc.stdout
