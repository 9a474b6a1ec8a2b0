"""Finding the ROCm libraries that hip-python opens, without asking the user to set anything.

hip-python opens ``libhiprtc.so`` and ``libamdhip64.so`` (unversioned names) from ``$ROCM_PATH/lib`` (default
``/opt/rocm``), else by bare name through the loader's search path. ROCm >= 5.3 ships ``libhiprtc.so``; ROCm 5.2
as Debian packages it keeps hiprtc inside ``libamdhip64.so.5`` and installs no unversioned names at all. When
the names hip-python wants are not where it looks, a private directory holding ``lib/libhiprtc.so`` and
``lib/libamdhip64.so`` symlinks to the real libraries stands in as the ROCm root.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

_SO_VERSION = re.compile(r"\.so((?:\.\d+)*)$")
_SHIM_MARK = ".portattn-rocm-shim"


def _user_root() -> Path | None:
    """``$ROCM_PATH`` or ``$ROCM_HOME`` unless it is one of our own shims."""
    for var in ("ROCM_PATH", "ROCM_HOME"):
        value = os.environ.get(var)
        if value and not (Path(value) / _SHIM_MARK).exists():
            return Path(value)
    return None


def _search_dirs() -> list[Path]:
    """Library directories in the order a ROCm install is looked for."""
    user = _user_root()
    dirs: list[Path] = [user / "lib"] if user else []
    dirs.append(Path("/opt/rocm/lib"))
    dirs += sorted(Path("/opt").glob("rocm-*/lib"), reverse=True)
    dirs += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for base in ("/usr/local/lib", "/usr/lib", "/lib"):
        if multiarch:
            dirs.append(Path(base) / multiarch)
        dirs.append(Path(base))
    dirs.append(Path("/usr/lib64"))
    seen: set[Path] = set()
    return [d for d in dirs if not (d in seen or seen.add(d))]


def _version_key(path: Path) -> tuple[int, ...]:
    m = _SO_VERSION.search(path.name)
    return tuple(int(x) for x in m.group(1).split(".")[1:]) if m and m.group(1) else ()


def find_library(stem: str, dirs: list[Path]) -> Path | None:
    """First ``<stem>.so`` or ``<stem>.so.N...`` in ``dirs`` (unversioned first, then the highest version)."""
    for d in dirs:
        if (d / f"{stem}.so").exists():
            return d / f"{stem}.so"
        found = [p for p in d.glob(f"{stem}.so.*") if p.exists() and _SO_VERSION.search(p.name)]
        if found:
            return max(found, key=_version_key)
    return None


def so_version(path: Path) -> str:
    """The version in a library's real file name: ``libamdhip64.so.5.2.21153`` -> ``5.2.21153``."""
    m = _SO_VERSION.search(Path(path).resolve().name)
    return m.group(1)[1:] if m and m.group(1) else "unknown"


@dataclass(frozen=True)
class RocmLibs:
    """The libraries behind the AMD backend and the root hip-python must be pointed at (if any)."""

    hiprtc: Path  # exports hiprtc*: libhiprtc.so[.N], or libamdhip64.so.5 on ROCm < 5.3
    amdhip: Path | None  # the HIP runtime
    comgr: Path | None  # the code object manager hiprtc compiles with
    shim_root: Path | None  # a private ROCm root for hip-python; None when it finds the libraries itself

    @property
    def hiprtc_in_runtime(self) -> bool:
        return self.amdhip is not None and self.hiprtc.resolve() == self.amdhip.resolve()

    def env(self) -> dict[str, str]:
        """Variables a fresh process needs so that any hip-python release finds these libraries."""
        if self.shim_root is None:
            return {}
        lib = str(self.shim_root / "lib")
        old = os.environ.get("LD_LIBRARY_PATH")
        return {"ROCM_PATH": str(self.shim_root), "LD_LIBRARY_PATH": f"{lib}{os.pathsep}{old}" if old else lib}


def _shim_base() -> list[Path]:
    from .cache import default_cache_dir

    uid = os.getuid() if hasattr(os, "getuid") else 0
    return [default_cache_dir() / "rocm-shim", Path(tempfile.gettempdir()) / f"portattn-rocm-shim-{uid}"]


def _shim_ok(root: Path, links: dict[str, Path]) -> bool:
    lib = root / "lib"
    return all((lib / n).is_symlink() and (lib / n).resolve() == t for n, t in links.items())


def make_shim(links: dict[str, Path]) -> Path:
    """A directory ``<root>/lib/<name> -> <target>`` for each link, created once and reused."""
    links = {n: Path(t).resolve() for n, t in links.items()}
    tag = hashlib.sha256(repr(sorted((n, str(t)) for n, t in links.items())).encode()).hexdigest()[:12]
    errors = []
    for base in _shim_base():
        root = base / tag
        if _shim_ok(root, links):
            return root
        try:
            base.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{tag}."))
            (tmp / "lib").mkdir()
            (tmp / _SHIM_MARK).write_text("symlinks to the ROCm libraries, made by portattn\n")
            for name, target in links.items():
                (tmp / "lib" / name).symlink_to(target)
            try:
                tmp.rename(root)
            except OSError:  # another process made it first, or a stale one is in the way
                shutil.rmtree(tmp, ignore_errors=True)
            if _shim_ok(root, links):
                return root
        except OSError as exc:
            errors.append(f"{base}: {exc}")
    raise OSError("cannot create a ROCm library directory for hip-python: " + "; ".join(errors))


@functools.lru_cache(maxsize=None)
def discover() -> RocmLibs | None:
    """The installed ROCm hiprtc/HIP/comgr libraries, or None when there is no hiprtc at all."""
    dirs = _search_dirs()
    amdhip = find_library("libamdhip64", dirs)
    hiprtc = find_library("libhiprtc", dirs) or amdhip  # ROCm < 5.3: hiprtc lives in the HIP runtime
    if hiprtc is None:
        return None
    comgr = find_library("libamd_comgr", [hiprtc.resolve().parent, *dirs])
    root = _user_root() or Path("/opt/rocm")
    wanted = {"libhiprtc.so": hiprtc, **({"libamdhip64.so": amdhip} if amdhip else {})}
    if all((root / "lib" / name).exists() for name in wanted):
        return RocmLibs(hiprtc, amdhip, comgr, None)
    return RocmLibs(hiprtc, amdhip, comgr, make_shim(wanted))


def prepare_process_env() -> RocmLibs | None:
    """Point this process's hip-python at the libraries (sets ROCM_PATH only when a shim is needed).

    Call before the first hip-python call; hip-python >= 10 resolves its library paths lazily on first use.
    """
    libs = discover()
    if libs is not None and libs.shim_root is not None:
        os.environ["ROCM_PATH"] = str(libs.shim_root)
    return libs
