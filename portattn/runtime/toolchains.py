"""ROCm hiprtc toolchains: this machine's ROCm, and ROCm releases that the setup script installed in chroots.

A toolchain is a set of ROCm libraries (hiprtc, comgr) and a way to run the compile worker
(``hiprtc_worker.py``, standard library only) against them:

- ``system``: the ROCm of this machine, the one attention compiles with at run time. The worker runs as
  ``python hiprtc_worker.py``.
- chroot toolchains: Debian roots made by ``scripts/install-rocm-chroots.sh``, one directory per toolchain under
  ``$PORTATTN_ROCM_TOOLCHAINS`` (default ``/var/lib/portattn/rocm-toolchains``) holding the manifest
  ``portattn-toolchain.json`` and the root ``root/``. The worker runs as ``chroot ROOT python3 -c <its source>``,
  which needs root. They serve verification and reports (which code other ROCm releases make of the kernels);
  attention never compiles with them.

Library paths are kept as the worker sees them (inside the root for a chroot).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import PortattnError
from .rocm_libs import discover, find_library, so_version

TOOLCHAINS_ENV = "PORTATTN_ROCM_TOOLCHAINS"
DEFAULT_TOOLCHAINS_DIR = Path("/var/lib/portattn/rocm-toolchains")
MANIFEST = "portattn-toolchain.json"
WORKER = Path(__file__).with_name("hiprtc_worker.py")
TIMEOUT_ENV = "PORTATTN_HIPRTC_TIMEOUT"
SYSTEM = "system"
_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib", "opt/rocm/lib")
_CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}


@dataclass(frozen=True)
class Toolchain:
    """One ROCm hiprtc installation and how to reach it."""

    name: str  # "system", or the chroot toolchain's directory name (e.g. "debian-sid")
    root: Path | None  # the chroot; None for this machine's own ROCm
    hiprtc: Path  # the library exporting hiprtc* (libhiprtc.so.N, or libamdhip64.so.N before ROCm 7 on Debian)
    comgr: Path | None  # the code object manager that hiprtc compiles with
    origin: str = ""  # where it came from (a chroot's manifest: suite and packages)

    def host_path(self, path: Path) -> Path:
        """``path`` (as the worker sees it) on this machine, symlinks followed inside the root."""
        return _resolve_in(self.root, path) if self.root is not None else Path(path).resolve()

    @property
    def rocm_release(self) -> str:
        """The ROCm release of the hiprtc library, from its file name: ``6.4.43484``."""
        return so_version(self.host_path(self.hiprtc))

    @property
    def rocm(self) -> str:
        """Major.minor of the ROCm release: ``6.4``."""
        return ".".join(self.rocm_release.split(".")[:2])

    @property
    def comgr_version(self) -> str:
        return so_version(self.host_path(self.comgr)) if self.comgr else "none"

    @property
    def label(self) -> str:
        """``ROCm 6.4 (debian-sid chroot)`` or ``ROCm 5.2 (system)``."""
        where = "system" if self.root is None else f"{self.name} chroot"
        return f"ROCm {self.rocm} ({where})"

    def version(self) -> str:
        """Versions plus a size fingerprint of the libraries: the compiler part of the cache key."""
        files = [self.host_path(p) for p in (self.hiprtc, self.comgr) if p is not None]
        stamp = hashlib.sha256(repr([(p.name, p.stat().st_size) for p in files]).encode()).hexdigest()[:10]
        where = "" if self.root is None else f" chroot {self.name}"
        return f"rocm {self.rocm_release} hiprtc {self.hiprtc.name} comgr {self.comgr_version}{where} [{stamp}]"

    def missing(self) -> str | None:
        """Why this toolchain cannot compile here (a sentence), or None."""
        if self.root is None:
            return None
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return f"the {self.name} toolchain runs its compiler in a chroot, which needs root"
        if not (self.root / "usr/bin/python3").exists():
            return f"the {self.name} toolchain's root {self.root} has no python3"
        return None

    def command(self) -> list[str]:
        """The worker's command line."""
        if self.root is None:
            return [sys.executable, str(WORKER)]
        return ["chroot", str(self.root), "python3", "-c", WORKER.read_text()]

    def run(self, request: dict, timeout: float | None = None) -> tuple[dict | None, int, str]:
        """Send ``request`` to a fresh worker process: (reply or None, exit status, stderr)."""
        why = self.missing()
        if why:
            raise PortattnError(why)
        request = {**request, "hiprtc": str(self.hiprtc), "comgr": str(self.comgr) if self.comgr else None}
        if self.root is None:
            libs = discover()
            env = {**os.environ, **(libs.env() if libs else {})}
        else:
            env = dict(_CHROOT_ENV)
        timeout = timeout or float(os.environ.get(TIMEOUT_ENV, "900"))
        try:
            proc = subprocess.run(self.command(), input=json.dumps(request).encode(), capture_output=True, env=env,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PortattnError(f"hiprtc ({self.label}) did not finish within {timeout:.0f} s "
                                f"(set {TIMEOUT_ENV} to wait longer)") from None
        stderr = proc.stderr.decode(errors="replace")
        try:
            reply = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError:
            reply = None
        return reply, proc.returncode, stderr

    def supported_archs(self) -> tuple[str, ...]:
        """Processors this toolchain's compiler can target (asks its code object manager, once)."""
        return _supported_archs(self)

    def objdump(self) -> str | None:
        """An llvm-objdump of this toolchain (as the worker sees it), or None."""
        if self.root is None:
            from .amdgpu_metadata import objdump_tool

            return objdump_tool()
        found = sorted(self.root.glob("usr/bin/llvm-objdump*"), key=lambda p: _numbers(p.name))
        return "/" + str(found[-1].relative_to(self.root)) if found else None

    def disassemble(self, binary: bytes, arch: str) -> str | None:
        """``llvm-objdump -d --mcpu=<arch>`` of a code object with this toolchain's tool; None without one."""
        tool = self.objdump()
        if tool is None or self.missing():
            return None
        if self.root is None:
            from .amdgpu_metadata import disassemble

            return disassemble(binary, arch)
        with tempfile.TemporaryDirectory(prefix="portattn-co-", dir=self.root / "tmp") as tmp:
            (Path(tmp) / "kernel.co").write_bytes(binary)
            inside = "/" + str(Path(tmp).relative_to(self.root) / "kernel.co")
            cmd = ["chroot", str(self.root), tool, "-d", f"--mcpu={arch}", inside]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(_CHROOT_ENV))
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.strip()}")
        return proc.stdout


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _resolve_in(root: Path, path: Path) -> Path:
    """``path`` (absolute inside ``root``) on this machine, following symlinks as the chroot would."""
    current = root
    parts = list(Path(path).relative_to("/").parts)
    for _ in range(64):
        if not parts:
            return current
        nxt = current / parts.pop(0)
        if nxt.is_symlink():
            link = Path(os.readlink(nxt))
            parts = list(link.parts[1:] if link.is_absolute() else link.parts) + parts
            current = root if link.is_absolute() else current
        elif nxt.name == "..":
            current = current.parent if current != root else root
        else:
            current = nxt
    raise OSError(f"too many symlinks resolving {path} in {root}")


@functools.lru_cache(maxsize=None)
def _supported_archs(toolchain: Toolchain) -> tuple[str, ...]:
    reply, code, stderr = toolchain.run({"op": "info"})
    if reply is None or reply.get("status") != "ok":
        raise PortattnError(f"cannot query hiprtc of {toolchain.label} (exit {code}): "
                            f"{(reply or {}).get('message', stderr[-2000:])}")
    return tuple(reply["isa"] or ())


def toolchains_dir() -> Path:
    """Where chroot toolchains live: ``$PORTATTN_ROCM_TOOLCHAINS`` or ``/var/lib/portattn/rocm-toolchains``."""
    return Path(os.environ.get(TOOLCHAINS_ENV) or DEFAULT_TOOLCHAINS_DIR)


def system_toolchain() -> Toolchain | None:
    """This machine's ROCm hiprtc, or None when none is installed."""
    libs = discover()
    if libs is None:
        return None
    return Toolchain(SYSTEM, None, libs.hiprtc, libs.comgr, "this machine's ROCm")


def chroot_toolchain(directory: Path) -> Toolchain | None:
    """The toolchain in ``directory`` (a manifest and ``root/``), or None when it holds no hiprtc library."""
    manifest = directory / MANIFEST
    root = directory / "root"
    try:
        meta = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    dirs = [root / d for d in _LIB_DIRS]
    found = find_library("libhiprtc", dirs) or find_library("libamdhip64", dirs)
    if found is None:
        return None
    comgr = find_library("libamd_comgr", dirs)
    inside = [None if p is None else Path("/") / p.relative_to(root) for p in (found, comgr)]
    packages = " ".join(meta.get("packages", []))
    origin = f"Debian {meta.get('suite', '?')} chroot: {packages}".strip()
    return Toolchain(directory.name, root, inside[0], inside[1], origin)


def chroot_toolchains() -> list[Toolchain]:
    """The chroot toolchains the setup script made, oldest ROCm first."""
    base = toolchains_dir()
    if not base.is_dir():
        return []
    found = [t for d in sorted(base.iterdir()) if (d / MANIFEST).is_file() for t in [chroot_toolchain(d)] if t]
    return sorted(found, key=lambda t: (_numbers(t.rocm_release), t.name))


def all_toolchains() -> list[Toolchain]:
    """The system toolchain (if any) first, then the chroot toolchains."""
    system = system_toolchain()
    return ([system] if system else []) + chroot_toolchains()


def find_toolchain(which: str | None = None) -> Toolchain:
    """The toolchain named ``which``: None or ``"system"`` for this machine's ROCm, a chroot toolchain's name, or a
    ROCm version (``"6"``, ``"6.4"``, ``"7.2.53211"``: the newest toolchain whose release starts with it, the
    system's first)."""
    present = all_toolchains()
    names = ", ".join(f"{t.name} (ROCm {t.rocm_release})" for t in present) or "none"
    if which is None or which == SYSTEM:
        system = system_toolchain()
        if system is None:
            raise PortattnError("no ROCm hiprtc library on this machine (scripts/install-rocm-toolchain.sh installs "
                                "ROCm 5.2 from Debian)")
        return system
    for t in present:
        if t.name == which:
            return t
    if not re.fullmatch(r"\d+(\.\d+)*", which):
        raise ValueError(f"rocm must be 'system', a toolchain name or a ROCm version such as 6.4, got {which!r}; "
                         f"present: {names}")
    matching = [t for t in present if (t.rocm_release + ".").startswith(which + ".")]
    if not matching:
        raise PortattnError(f"no ROCm {which} toolchain here; present: {names} "
                            "(scripts/install-rocm-chroots.sh installs the Debian ones, as root)")
    system = [t for t in matching if t.root is None]
    return system[0] if system else matching[-1]
