"""Finding the ROCm libraries and the symlink directory that stands in for a ROCm root (no ROCm needed)."""
from __future__ import annotations

import os

import pytest

from portattn.runtime import rocm_libs


def _touch(path, size=1):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def test_find_library_prefers_unversioned_then_highest_version(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _touch(a / "libamdhip64.so.5.2.21153")
    _touch(a / "libamdhip64.so.5.10.1")
    (a / "libamdhip64.so.5").symlink_to(a / "libamdhip64.so.5.2.21153")
    _touch(b / "libamdhip64.so")
    assert rocm_libs.find_library("libamdhip64", [a, b]) == a / "libamdhip64.so.5.10.1"
    assert rocm_libs.find_library("libamdhip64", [b, a]) == b / "libamdhip64.so"
    assert rocm_libs.find_library("libhiprtc", [a, b]) is None
    assert rocm_libs.so_version(a / "libamdhip64.so.5") == "5.2.21153"


def test_shim_links_both_names_and_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTATTN_CACHE_DIR", str(tmp_path / "cache"))
    runtime = _touch(tmp_path / "sys" / "libamdhip64.so.5.2.21153")
    root = rocm_libs.make_shim({"libhiprtc.so": runtime, "libamdhip64.so": runtime})
    assert root.parent == tmp_path / "cache" / "rocm-shim"
    for name in ("libhiprtc.so", "libamdhip64.so"):
        assert (root / "lib" / name).is_symlink() and (root / "lib" / name).resolve() == runtime
    mtime = os.stat(root).st_mtime_ns
    assert rocm_libs.make_shim({"libhiprtc.so": runtime, "libamdhip64.so": runtime}) == root
    assert os.stat(root).st_mtime_ns == mtime

    libs = rocm_libs.RocmLibs(runtime, runtime, None, root)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/elsewhere")
    env = libs.env()
    assert env["ROCM_PATH"] == str(root)
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [str(root / "lib"), "/elsewhere"]
    assert libs.hiprtc_in_runtime
    assert rocm_libs.RocmLibs(runtime, runtime, None, None).env() == {}


def test_our_shim_is_not_taken_for_a_user_rocm_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTATTN_CACHE_DIR", str(tmp_path / "cache"))
    runtime = _touch(tmp_path / "sys" / "libamdhip64.so.5.2.21153")
    root = rocm_libs.make_shim({"libhiprtc.so": runtime})
    monkeypatch.setenv("ROCM_PATH", str(root))
    monkeypatch.delenv("ROCM_HOME", raising=False)
    assert rocm_libs._user_root() is None
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "sys"))
    assert rocm_libs._user_root() == tmp_path / "sys"


def test_discover_on_this_machine():
    libs = rocm_libs.discover()
    if libs is None:
        pytest.skip("no ROCm hiprtc library installed")
    assert libs.hiprtc.exists()
    if libs.shim_root is not None:  # hip-python will be pointed at the shim: it must hold both names
        assert (libs.shim_root / "lib" / "libhiprtc.so").resolve() == libs.hiprtc.resolve()
