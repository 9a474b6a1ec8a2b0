"""Where the kernel sources live and how they are read.

The CUDA source tree (``src_cuda``) is compiled on NVIDIA, the generated HIP tree (``src_hip``) on AMD. In a
checkout they sit beside the package; an installed wheel carries them inside the package.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

HEADER_SUFFIXES = (".cuh", ".h")


def source_dir(vendor: str) -> Path:
    """The directory holding the kernel sources for ``vendor`` (``"cuda"`` or ``"hip"``)."""
    name = {"cuda": "src_cuda", "hip": "src_hip"}[vendor]
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / name, package.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"portattn kernel sources '{name}' not found next to {package}")


@dataclass(frozen=True)
class KernelSource:
    """A kernel's main file and every header of its tree, as text."""

    name: str
    text: str
    headers: tuple[tuple[str, str], ...]

    @functools.cached_property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (self.name, self.text, *(x for pair in self.headers for x in pair)):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()


def read_source(vendor: str, filename: str) -> KernelSource:
    """Read ``filename`` and all headers of the vendor's source tree."""
    root = source_dir(vendor)
    headers = tuple(
        (p.name, p.read_text()) for p in sorted(root.iterdir()) if p.suffix in HEADER_SUFFIXES and p.is_file()
    )
    return KernelSource(filename, (root / filename).read_text(), headers)


def read_header(name: str) -> str:
    """The text of one header of the CUDA source tree (the parameter structs are read from there)."""
    return (source_dir("cuda") / name).read_text()
