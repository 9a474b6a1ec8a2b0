"""Run one hiprtc request in a process of its own: comgr aborts the whole process on some inputs.

Usage: ``python hiprtc_worker.py`` (or ``python -m portattn.runtime.hiprtc_worker``) with one JSON request on
stdin; one JSON reply goes to stdout, and whatever the libraries print is sent to stderr. Requests:

- ``{"op": "info", "comgr": path|null}`` -> ``{"status": "ok", "isa": [...], "hiprtc_version": [major, minor]}``
- ``{"op": "compile", "name", "text", "headers": [[name, text], ...], "options": [...], "arch", "comgr"}``
  -> ``{"status": "ok", "code": base64, "log"}`` | ``{"status": "compile_error", "log", "result"}``
  | ``{"status": "unsupported_arch", "isa": [...]}``

Any other failure -> ``{"status": "error", "message"}``. Only the standard library and hip-python are imported.
"""
from __future__ import annotations

import base64
import ctypes
import json
import os
import sys


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
    get_count.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    get_name.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p)]
    count = ctypes.c_size_t()
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


def _check(hiprtc, result, call: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        msg = hiprtc.hiprtcGetErrorString(err)
        msg = msg[-1] if isinstance(msg, tuple) else msg
        msg = msg.decode(errors="replace") if isinstance(msg, bytes) else str(msg)
        raise _CallFailed(f"{call} failed: {err} ({msg})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _compile(hiprtc, req: dict) -> dict:
    headers = req.get("headers") or []
    prog = _check(
        hiprtc,
        hiprtc.hiprtcCreateProgram(req["text"].encode(), req["name"].encode(), len(headers),
                                   [t.encode() for _, t in headers], [n.encode() for n, _ in headers]),
        "hiprtcCreateProgram",
    )
    try:
        opts = [o.encode() for o in req["options"]]
        (status,) = hiprtc.hiprtcCompileProgram(prog, len(opts), opts)
        size = _check(hiprtc, hiprtc.hiprtcGetProgramLogSize(prog), "hiprtcGetProgramLogSize")
        buf = bytearray(max(int(size), 1))
        _check(hiprtc, hiprtc.hiprtcGetProgramLog(prog, buf), "hiprtcGetProgramLog")
        log = bytes(buf).rstrip(b"\0").decode(errors="replace")
        if int(status) != 0:
            return {"status": "compile_error", "log": log, "result": str(status)}
        size = int(_check(hiprtc, hiprtc.hiprtcGetCodeSize(prog), "hiprtcGetCodeSize"))
        code = bytearray(size)
        _check(hiprtc, hiprtc.hiprtcGetCode(prog, code), "hiprtcGetCode")
        return {"status": "ok", "code": base64.b64encode(bytes(code)).decode(), "log": log}
    finally:
        # The C call takes hiprtcProgram*: hand it a reference to the handle, not the handle itself.
        _check(hiprtc, hiprtc.hiprtcDestroyProgram(prog.createRef()), "hiprtcDestroyProgram")


def handle(req: dict) -> dict:
    """Serve one request (see the module docstring)."""
    isa = isa_names(req.get("comgr"))
    if req["op"] == "info":
        from hip import hiprtc

        major, minor = _check(hiprtc, hiprtc.hiprtcVersion(), "hiprtcVersion")
        return {"status": "ok", "isa": isa, "hiprtc_version": [int(major), int(minor)]}
    if req["op"] == "compile":
        if isa is not None and req["arch"].split(":")[0] not in isa:
            return {"status": "unsupported_arch", "isa": isa}
        from hip import hiprtc

        return _compile(hiprtc, req)
    return {"status": "error", "message": f"unknown request {req['op']!r}"}


def main() -> int:
    reply_to = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # library chatter on stdout must not corrupt the reply
    try:
        reply = handle(json.load(sys.stdin))
    except ImportError as exc:
        reply = {"status": "error", "message": f"hip-python is not importable: {exc}"}
    except Exception as exc:  # reported to the parent, which raises
        reply = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
    json.dump(reply, reply_to)
    reply_to.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
