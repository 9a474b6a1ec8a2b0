"""The compile cache: memory and disk hits, invalidation by any source change, option and arch in the key,
corrupted entries, and a cache directory shared with other files (NVRTC builds; no GPU needed)."""
import shutil
from dataclasses import replace

import pytest

import portattn.runtime.sources as sources
from portattn.kernels.forward import shipped_variants
from portattn.runtime.cache import DiskCache
from portattn.runtime.compiler import clear_memory_cache, compile_kernel
from portattn.runtime.target import Target
from portattn.tools.cli import main

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed")


@pytest.fixture
def cache(tmp_path):
    clear_memory_cache()
    yield DiskCache(tmp_path / "cache")
    clear_memory_cache()


@pytest.fixture
def src_copy(tmp_path, monkeypatch):
    """A private copy of the CUDA source tree that compile_kernel reads from."""
    root = tmp_path / "src_cuda"
    shutil.copytree(sources.source_dir("cuda"), root)
    monkeypatch.setattr(sources, "source_dir", lambda vendor: root)
    return root


def _spec():
    target = Target.for_arch("sm_90")
    return shipped_variants(target)[0], target


def test_cache_miss_then_hit_then_invalidation(src_copy, cache):
    spec, target = _spec()
    first = compile_kernel(spec, target, cache)
    assert not first.from_disk and len(cache.entries()) == 1
    assert compile_kernel(spec, target, cache) is first  # in-memory
    clear_memory_cache()
    again = compile_kernel(spec, target, cache)
    assert again.from_disk and again.binary == first.binary and again.key == first.key
    assert again.resources == first.resources
    # A change in any header invalidates the entry.
    header = src_copy / "pa_prelude.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    changed = compile_kernel(spec, target, cache)
    assert changed.key != first.key and not changed.from_disk and len(cache.entries()) == 2


def test_cache_key_covers_options_and_arch(cache):
    spec, target = _spec()
    a = compile_kernel(spec, target, cache)
    b = compile_kernel(spec, Target.for_arch("sm_80"), cache)
    other = replace(spec, head_dim=64)
    c = compile_kernel(other, target, cache)
    assert len({a.key, b.key, c.key}) == 3


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_corrupted_entry_is_recompiled(src_copy, cache, damage):
    spec, target = _spec()
    good = compile_kernel(spec, target, cache)
    path = cache.path(good.key)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 3]
    else:
        data = bytearray(b"not a cache entry")
    path.write_bytes(bytes(data))
    assert cache.get(good.key) is None
    clear_memory_cache()
    again = compile_kernel(spec, target, cache)
    assert not again.from_disk and again.binary == good.binary
    if damage == "garbage":  # no longer recognisable as an entry: it could be anyone's file, so it stays
        assert path.read_bytes() == b"not a cache entry"
    else:
        assert cache.get(good.key) is not None, "the entry is rewritten whole"


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTATTN_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert DiskCache().directory == tmp_path / "elsewhere"


def test_clear_removes_only_the_caches_own_entries(tmp_path, monkeypatch, capsys, cache):
    """A cache directory that holds other files: ``portattn cache clear`` removes the compiled kernels, and nothing
    else, not even a file with an entry's name that is not an entry."""
    folder = tmp_path / "shared"
    monkeypatch.setenv("PORTATTN_CACHE_DIR", str(folder))
    spec, target = _spec()
    kernel = compile_kernel(spec, target, DiskCache())
    others = {
        "firmware.bin": b"\x7fELF user firmware",
        "notes.txt": b"keep me",
        "0123456789abcdef0123456789abcdef01234567.bin": b"not a portattn entry",
    }
    for name, data in others.items():
        (folder / name).write_bytes(data)
    (folder / "sub").mkdir()
    (folder / "sub" / f"{kernel.key}.bin").write_bytes(DiskCache().path(kernel.key).read_bytes())
    assert DiskCache().entries() == [DiskCache().path(kernel.key)]
    assert main(["cache", "clear"]) == 0
    assert "removed 1 cache entries" in capsys.readouterr().out
    for name, data in others.items():
        assert (folder / name).read_bytes() == data
    assert (folder / "sub" / f"{kernel.key}.bin").exists()
    assert not DiskCache().path(kernel.key).exists()
    # a file in the way of an entry is left alone, and the compile still succeeds
    squatter = DiskCache().path(kernel.key)
    squatter.write_bytes(b"user data")
    clear_memory_cache()
    assert compile_kernel(spec, target, DiskCache()).binary == kernel.binary
    assert squatter.read_bytes() == b"user data"
