"""The launch-state caches of the kernel families stay bounded."""
from portattn.runtime import loader


def test_remember_keeps_at_most_the_limit_and_returns_the_value(monkeypatch):
    monkeypatch.setattr(loader, "SIGNATURES_KEPT", 3)
    cache: dict = {}
    for i in range(10):
        assert loader.remember(cache, ("shape", i), i) == i
        assert len(cache) <= 3 and cache[("shape", i)] == i


def test_overlapping_launch_structs_match_the_cuda_driver_layout():
    """CUlaunchAttribute is an id, padding to 8 bytes and a 64-byte value union; CUlaunchConfig seven unsigned
    ints, the stream, the attribute pointer and their count (cuda.h)."""
    import ctypes

    from portattn.runtime import cuda_driver as c

    assert (ctypes.sizeof(c._LaunchAttribute), c._LaunchAttribute.value.offset) == (72, 8)
    assert (c._OVERLAP.id, c._OVERLAP.value) == (6, 1)  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    fields = c._LaunchConfig
    assert (fields.smem_bytes.offset, fields.stream.offset, fields.attrs.offset, fields.num_attrs.offset) == (24, 32,
                                                                                                           40, 48)
    assert ctypes.sizeof(c._LaunchConfig) == 56


def test_overlapping_launch_configurations_are_made_once_and_stay_bounded(monkeypatch):
    from portattn.runtime import cuda_driver as c

    monkeypatch.setattr(c, "_CONFIGS_KEPT", 2)
    fn = c.Function(handle=None, name="k", device_index=0)
    first = c._overlap_config(fn, (4, 1, 1), (64, 1, 1), 1024, 7)
    assert c._overlap_config(fn, (4, 1, 1), (64, 1, 1), 1024, 7) is first
    assert (list(first.grid), list(first.block), first.smem_bytes, first.stream, first.num_attrs) == (
        [4, 1, 1], [64, 1, 1], 1024, 7, 1)
    for stream in range(10):
        c._overlap_config(fn, (4, 1, 1), (64, 1, 1), 1024, stream)
        assert len(fn.overlap_configs) <= 2
