"""ROCm toolchains: finding chroot toolchains by their manifest, versions, selection, and the setup script's
refusals (no ROCm or chroot needed)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from portattn.errors import PortattnError
from portattn.runtime import toolchains
from portattn.runtime.toolchains import MANIFEST, Toolchain, chroot_toolchain, chroot_toolchains, find_toolchain

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-rocm-chroots.sh"
LIB = "usr/lib/x86_64-linux-gnu"


def make_chroot(base: Path, name: str, hiprtc: str, comgr: str = "libamd_comgr.so.3.0.0", absolute: bool = False,
                manifest: bool = True) -> Path:
    """A directory shaped like one the setup script makes, with empty library files and Debian's symlinks."""
    root = base / name / "root"
    (root / LIB).mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").write_bytes(b"")
    for real in (hiprtc, comgr):
        (root / LIB / real).write_bytes(b"\0" * 64)
        soname = root / LIB / ".".join(real.split(".")[:3])  # libhiprtc.so.7 -> libhiprtc.so.7.2.53211
        soname.symlink_to(f"/{LIB}/{real}" if absolute else real)
    if manifest:
        (base / name / MANIFEST).write_text(json.dumps({"name": name, "suite": "sid", "packages": ["x"]}))
    return root


def test_chroot_toolchain_is_found_by_its_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv(toolchains.TOOLCHAINS_ENV, str(tmp_path))
    make_chroot(tmp_path, "debian-experimental", "libhiprtc.so.7.2.53211")
    make_chroot(tmp_path, "debian-sid", "libamdhip64.so.6.4.43484", absolute=True)
    make_chroot(tmp_path, "not-ours", "libhiprtc.so.7.2.53211", manifest=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / MANIFEST).write_text("{}")
    found = chroot_toolchains()
    assert [(t.name, t.rocm, t.rocm_release) for t in found] == [("debian-sid", "6.4", "6.4.43484"),
                                                                  ("debian-experimental", "7.2", "7.2.53211")]
    sid, exp = found
    assert sid.hiprtc == Path(f"/{LIB}/libamdhip64.so.6.4.43484")  # the path the worker sees inside the root
    # an absolute symlink inside the root points into the root, not at this machine's file of that name
    assert sid.host_path(Path(f"/{LIB}/libamdhip64.so.6")) == sid.root / LIB / "libamdhip64.so.6.4.43484"
    assert exp.comgr == Path(f"/{LIB}/libamd_comgr.so.3.0.0") and exp.comgr_version == "3.0.0"
    assert exp.label == "ROCm 7.2 (debian-experimental chroot)"
    assert exp.version().startswith("rocm 7.2.53211 hiprtc libhiprtc.so.7.2.53211 comgr 3.0.0 chroot debian-exp")
    assert exp.command()[:4] == ["chroot", str(exp.root), "python3", "-c"]
    assert "def handle(" in exp.command()[4]  # the worker's own source: nothing of portattn is installed there


def test_find_toolchain_by_name_or_version(tmp_path, monkeypatch):
    monkeypatch.setenv(toolchains.TOOLCHAINS_ENV, str(tmp_path))
    monkeypatch.setattr(toolchains, "system_toolchain", lambda: None)
    make_chroot(tmp_path, "debian-sid", "libamdhip64.so.6.4.43484")
    make_chroot(tmp_path, "debian-experimental", "libhiprtc.so.7.2.53211")
    assert find_toolchain("6.4").name == find_toolchain("6").name == find_toolchain("debian-sid").name == "debian-sid"
    assert find_toolchain("7.2.53211").name == "debian-experimental"
    with pytest.raises(PortattnError, match="no ROCm 6.2 toolchain here; present: debian-sid"):
        find_toolchain("6.2")
    with pytest.raises(ValueError, match="rocm must be 'system', a toolchain name or a ROCm version"):
        find_toolchain("latest")
    with pytest.raises(PortattnError, match="no ROCm hiprtc library on this machine"):
        find_toolchain(None)


def test_chroot_needs_root(tmp_path, monkeypatch):
    root = make_chroot(tmp_path, "debian-sid", "libamdhip64.so.6.4.43484")
    tc = chroot_toolchain(root.parent)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in tc.missing()
    with pytest.raises(PortattnError, match="needs root"):
        tc.run({"op": "info"})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert tc.missing() is None
    (root / "usr/bin/python3").unlink()
    assert "has no python3" in tc.missing()


def test_system_toolchain_runs_the_worker_file():
    tc = Toolchain("system", None, Path("/x/libamdhip64.so.5"), None)
    assert tc.missing() is None and tc.command()[-1].endswith("hiprtc_worker.py") and tc.comgr_version == "none"


def _script(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_setup_script_can_be_told_to_make_nothing(tmp_path):
    proc = _script({"PORTATTN_ROCM_TOOLCHAINS": str(tmp_path / "t"), "PORTATTN_ROCM_CHROOTS": "none"})
    assert proc.returncode == 0 and "skipping: PORTATTN_ROCM_CHROOTS=none" in proc.stdout
    assert not (tmp_path / "t").exists()


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/debootstrap").exists(),
                    reason="runs the script's checks as root with debootstrap present (as setup leaves it)")
def test_setup_script_leaves_what_it_did_not_make(tmp_path):
    theirs = tmp_path / "debian-sid"
    theirs.mkdir()
    (theirs / "data").write_text("someone else's")
    proc = _script({"PORTATTN_ROCM_TOOLCHAINS": str(tmp_path), "PORTATTN_ROCM_CHROOTS": "debian-sid debian-nothing"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"skipping debian-sid: {theirs} exists and was not made by this script" in proc.stdout
    assert "skipping debian-nothing: unknown toolchain" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["debian-sid"]
    assert [p.name for p in theirs.iterdir()] == ["data"] and (theirs / "data").read_text() == "someone else's"
