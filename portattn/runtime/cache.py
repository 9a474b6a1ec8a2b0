"""On-disk cache of compiled kernels.

An entry is one file named ``<key>.bin``: a magic line, the SHA-256 of the body, then the body (a JSON header with
the compiler log and resources, and the binary). Writes go to a temporary file that is renamed into place, so
readers see either the old entry or the whole new one; an entry whose hash does not match is treated as missing.
The directory may be shared with other files: only files with an entry's name and magic line count as entries,
and only those are ever removed.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
from pathlib import Path

CACHE_ENV = "PORTATTN_CACHE_DIR"
_MAGIC = b"PORTATTN-KERNEL-1\n"
_ENTRY_NAME = re.compile(r"[0-9a-f]{40}\.bin")


def default_cache_dir() -> Path:
    """``$PORTATTN_CACHE_DIR``, else ``$XDG_CACHE_HOME/portattn``, else ``~/.cache/portattn``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "portattn"


class DiskCache:
    """Key -> (metadata, binary) entries in a directory."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.bin"

    def get(self, key: str) -> tuple[dict, bytes] | None:
        """The entry for ``key``, or None when absent, truncated or corrupted."""
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None
        if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 32 + 8:
            return None
        digest = data[len(_MAGIC) : len(_MAGIC) + 32]
        body = data[len(_MAGIC) + 32 :]
        if hashlib.sha256(body).digest() != digest:
            return None
        (meta_len,) = struct.unpack_from("<Q", body)
        if 8 + meta_len > len(body):
            return None
        try:
            meta = json.loads(body[8 : 8 + meta_len])
        except ValueError:
            return None
        return meta, body[8 + meta_len :]

    def put(self, key: str, meta: dict, binary: bytes) -> None:
        """Store an entry atomically; a cache that cannot be written is skipped silently, and so is a key whose file
        name is taken by a file that is not an entry."""
        if self.path(key).exists() and not _is_entry(self.path(key)):
            return
        meta_bytes = json.dumps(meta, sort_keys=True).encode()
        body = struct.pack("<Q", len(meta_bytes)) + meta_bytes + binary
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{key}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_MAGIC + hashlib.sha256(body).digest() + body)
                os.replace(tmp, self.path(key))
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass

    def entries(self) -> list[Path]:
        """The cache's own entry files: an entry's name and its magic line (any other file is not ours)."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if _ENTRY_NAME.fullmatch(p.name) and _is_entry(p))

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.entries())

    def clear(self) -> int:
        """Remove the cache's own entries (see :meth:`entries`), never another file; returns how many."""
        removed = 0
        for p in self.entries():
            p.unlink(missing_ok=True)
            removed += 1
        return removed


def _is_entry(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return path.is_file() and f.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False
