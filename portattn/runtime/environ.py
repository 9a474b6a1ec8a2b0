"""Environment variables read on the per-call path. ``os.environ.get`` encodes the name and, for a variable that is
not set, raises and catches a KeyError: about a microsecond, several times per call. ``get`` looks the name up in
the mapping that ``os.environ`` itself keeps up to date (CPython on POSIX: bytes names and values) and gives the
same answer."""
from __future__ import annotations

import os
import sys

_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
_ENCODING = sys.getfilesystemencoding()


_names: dict[str, bytes] = {}  # the names asked for, encoded as the mapping holds them


def get(name: str) -> str | None:
    """The value of the environment variable ``name`` as ``os.environ`` has it, or None when it is not set."""
    if _DATA is None:
        return os.environ.get(name)
    encoded = _names.get(name)
    if encoded is None:
        encoded = _names[name] = name.encode(_ENCODING, "surrogateescape")
    value = _DATA.get(encoded)
    return None if value is None else value.decode(_ENCODING, "surrogateescape")
