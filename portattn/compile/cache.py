"""On-disk cache of compiled kernels.

An entry is one file: a magic line, the SHA-256 of the body, then the body (a JSON header with the compiler
log and resources, and the binary). Writes go to a temporary file that is renamed into place, so readers see
either the old entry or the whole new one; an entry whose hash does not match is treated as missing.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path

CACHE_ENV = "PORTATTN_CACHE_DIR"
_MAGIC = b"PORTATTN-KERNEL-1\n"


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
        """Store an entry atomically; a cache that cannot be written is skipped silently."""
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
        return sorted(self.directory.glob("*.bin")) if self.directory.is_dir() else []

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.entries())

    def clear(self) -> int:
        """Remove every entry; returns how many were removed."""
        removed = 0
        for p in self.entries():
            p.unlink(missing_ok=True)
            removed += 1
        return removed
