"""Run one hiprtc request in a process of its own: comgr aborts the whole process on some inputs.

Self-contained (standard library only, ctypes against ROCm's libraries) so that the same file serves the system
ROCm (``python hiprtc_worker.py``) and a ROCm installed in a chroot (``chroot DIR python3 -c <this file's text>``,
where no package of this project is installed). One JSON request on stdin, one JSON reply on stdout; whatever
the libraries print goes to stderr. Library paths are those seen by the worker (inside the chroot for a chroot).

- ``{"op": "info", "hiprtc": path, "comgr": path|null}``
  -> ``{"status": "ok", "isa": [...]|null, "hiprtc_version": [major, minor]}``
- ``{"op": "compile", "hiprtc", "comgr", "name", "text", "headers": [[name, text], ...], "options": [...], "arch"}``
  -> ``{"status": "ok", "code": base64, "log"}`` | ``{"status": "compile_error", "log", "result"}``
  | ``{"status": "unsupported_arch", "isa": [...]}``

Any other failure -> ``{"status": "error", "message"}``.
"""
from __future__ import annotations

import base64
import ctypes
import json
import os
import sys

_VOIDP = ctypes.c_void_p
_SIZE = ctypes.c_size_t
_STRS = ctypes.POINTER(ctypes.c_char_p)


class _CallFailed(Exception):
    pass


def isa_names(comgr_path: str | None) -> list[str] | None:
    """Processor names the code object manager knows (``gfx90a``...), or None when it cannot be asked."""
    if not comgr_path:
        return None
    try:
        lib = ctypes.CDLL(comgr_path)
        get_count, get_name = lib.amd_comgr_get_isa_count, lib.amd_comgr_get_isa_name
    except (OSError, AttributeError):
        return None
    get_count.argtypes = [ctypes.POINTER(_SIZE)]
    get_name.argtypes = [_SIZE, ctypes.POINTER(ctypes.c_char_p)]
    count = _SIZE()
    if get_count(ctypes.byref(count)) != 0:
        return None
    names = set()
    for i in range(count.value):
        name = ctypes.c_char_p()
        if get_name(i, ctypes.byref(name)) != 0 or not name.value:
            return None
        # "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" -> "gfx90a"
        names.add(name.value.decode().split("--", 1)[-1].split(":")[0])
    return sorted(names, key=lambda n: (len(n), n))  # gfx600 ... gfx90c, gfx1010 ...


def _strings(items: list[str]):
    return (ctypes.c_char_p * max(len(items), 1))(*[s.encode() for s in items])


class _Hiprtc:
    """The hiprtc C API (``hiprtc.h``) through ctypes."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        self.lib = lib
        lib.hiprtcGetErrorString.restype = ctypes.c_char_p
        lib.hiprtcGetErrorString.argtypes = [ctypes.c_int]
        lib.hiprtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
        lib.hiprtcCreateProgram.argtypes = [ctypes.POINTER(_VOIDP), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                            _STRS, _STRS]
        lib.hiprtcCompileProgram.argtypes = [_VOIDP, ctypes.c_int, _STRS]
        lib.hiprtcGetProgramLogSize.argtypes = [_VOIDP, ctypes.POINTER(_SIZE)]
        lib.hiprtcGetProgramLog.argtypes = [_VOIDP, ctypes.c_char_p]
        lib.hiprtcGetCodeSize.argtypes = [_VOIDP, ctypes.POINTER(_SIZE)]
        lib.hiprtcGetCode.argtypes = [_VOIDP, ctypes.c_char_p]
        lib.hiprtcDestroyProgram.argtypes = [ctypes.POINTER(_VOIDP)]

    def check(self, err: int, call: str) -> None:
        if err != 0:
            msg = self.lib.hiprtcGetErrorString(err) or b"?"
            raise _CallFailed(f"{call} failed: {err} ({msg.decode(errors='replace')})")

    def version(self) -> list[int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.hiprtcVersion(ctypes.byref(major), ctypes.byref(minor)), "hiprtcVersion")
        return [major.value, minor.value]

    def compile(self, req: dict) -> dict:
        lib = self.lib
        headers = req.get("headers") or []
        prog = _VOIDP()
        self.check(lib.hiprtcCreateProgram(ctypes.byref(prog), req["text"].encode(), req["name"].encode(),
                                           len(headers), _strings([t for _, t in headers]),
                                           _strings([n for n, _ in headers])), "hiprtcCreateProgram")
        try:
            opts = list(req["options"])
            status = lib.hiprtcCompileProgram(prog, len(opts), _strings(opts))
            size = _SIZE()
            self.check(lib.hiprtcGetProgramLogSize(prog, ctypes.byref(size)), "hiprtcGetProgramLogSize")
            buf = ctypes.create_string_buffer(max(size.value, 1))
            self.check(lib.hiprtcGetProgramLog(prog, buf), "hiprtcGetProgramLog")
            log = buf.raw.rstrip(b"\0").decode(errors="replace")
            if status != 0:
                return {"status": "compile_error", "log": log, "result": str(status)}
            self.check(lib.hiprtcGetCodeSize(prog, ctypes.byref(size)), "hiprtcGetCodeSize")
            code = ctypes.create_string_buffer(size.value)
            self.check(lib.hiprtcGetCode(prog, code), "hiprtcGetCode")
            return {"status": "ok", "code": base64.b64encode(code.raw).decode(), "log": log}
        finally:
            self.check(lib.hiprtcDestroyProgram(ctypes.byref(prog)), "hiprtcDestroyProgram")


def handle(req: dict) -> dict:
    """Serve one request (see the module docstring)."""
    isa = isa_names(req.get("comgr"))
    if req["op"] == "info":
        return {"status": "ok", "isa": isa, "hiprtc_version": _Hiprtc(req["hiprtc"]).version()}
    if req["op"] == "compile":
        if isa is not None and req["arch"].split(":")[0] not in isa:
            return {"status": "unsupported_arch", "isa": isa}
        return _Hiprtc(req["hiprtc"]).compile(req)
    return {"status": "error", "message": f"unknown request {req['op']!r}"}


def main() -> int:
    reply_to = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # library chatter on stdout must not corrupt the reply
    try:
        reply = handle(json.load(sys.stdin))
    except Exception as exc:  # reported to the parent, which raises
        reply = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
    json.dump(reply, reply_to)
    reply_to.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
