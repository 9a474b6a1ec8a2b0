"""The launch-state caches of the kernel families stay bounded; launches with tensor maps keep their struct."""
import ctypes
import threading
from types import SimpleNamespace

import pytest
import torch

from portattn.runtime import loader
from portattn.runtime.target import Target


def test_remember_keeps_at_most_the_limit_and_returns_the_value(monkeypatch):
    monkeypatch.setattr(loader, "SIGNATURES_KEPT", 3)
    cache: dict = {}
    for i in range(10):
        assert loader.remember(cache, ("shape", i), i) == i
        assert len(cache) <= 3 and cache[("shape", i)] == i


def test_overlapping_launch_structs_match_the_cuda_driver_layout():
    """CUlaunchAttribute is an id, padding to 8 bytes and a 64-byte value union; CUlaunchConfig seven unsigned
    ints, the stream, the attribute pointer and their count (cuda.h)."""
    from portattn.runtime import cuda_driver as c

    assert (ctypes.sizeof(c._LaunchAttribute), c._LaunchAttribute.value.offset) == (72, 8)
    assert (c._OVERLAP.id, c._OVERLAP.value) == (6, 1)  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    fields = c._LaunchConfig
    assert (fields.smem_bytes.offset, fields.stream.offset, fields.attrs.offset, fields.num_attrs.offset) == (24, 32,
                                                                                                           40, 48)
    assert ctypes.sizeof(c._LaunchConfig) == 56


class _Driver:
    """The driver's context and launch entry points as ``cuda_driver.launcher`` calls them, recorded: the calling
    thread has ``current`` as its context."""

    def __init__(self, current: int) -> None:
        self.current, self.calls = current, []

    def cuCtxGetCurrent(self, ref) -> int:
        ref._obj.value = self.current
        return 0

    def cuCtxPushCurrent_v2(self, context: int) -> int:
        self.calls.append(("push", context))
        self.saved, self.current = self.current, context
        return 0

    def cuCtxPopCurrent_v2(self, ref) -> int:
        self.calls.append(("pop",))
        self.current = self.saved
        return 0

    def cuLaunchKernelEx(self, config, address: int, args: int, extra: None) -> int:
        self.calls.append(("ex", config, address, args, self.current))
        return 0

    def cuLaunchKernel(self, address: int, *rest) -> int:
        self.calls.append(("plain", address, *rest, self.current))
        return 0


def test_launches_run_in_the_functions_context_with_configurations_made_once(monkeypatch):
    """A launch made ready by ``cuda_driver.launcher`` runs in its function's context (pushed for the launch when
    the thread has another one current), and an overlapping one keeps one launch configuration per stream, at most
    _CONFIGS_KEPT of them."""
    from portattn.runtime import cuda_driver as c

    driver = _Driver(current=0x77)
    monkeypatch.setattr(c, "_launch_lib", driver)
    monkeypatch.setattr(c, "_CONFIGS_KEPT", 2)
    fn = c.Function(handle=None, name="k", device_index=0, address=0x5000, context=0x77)
    go = c.launcher(fn, (4, 1, 1), (64, 1, 1), 1024, overlap=True)
    go(0xA0, 7)
    go(0xA8, 7)
    (_, first, *rest1), (_, again, *rest2) = driver.calls
    assert first is again and rest1 == [0x5000, 0xA0, 0x77] and rest2 == [0x5000, 0xA8, 0x77]
    assert (list(first.grid), list(first.block), first.smem_bytes, first.stream, first.num_attrs) == (
        [4, 1, 1], [64, 1, 1], 1024, 7, 1)
    go(0xA0, 8)
    go(0xA0, 9)  # a third stream: the two kept configurations are dropped
    go(0xA0, 7)
    assert driver.calls[-1][1] is not first and driver.calls[-1][1].stream == 7
    driver.calls.clear()
    driver.current = 0x99  # another context is current: pushed for the launch, then popped
    c.launcher(fn, (4, 1, 1), (64, 1, 1), 1024)(0xB0, 3)
    assert driver.calls == [("push", 0x77), ("plain", 0x5000, 4, 1, 1, 64, 1, 1, 1024, 3, 0xB0, None, 0x77), ("pop",)]
    assert driver.current == 0x99


def test_launches_with_tensor_maps_repoint_only_what_changed(monkeypatch):
    """A launch with tensor maps sets each call's fields on a 128-byte aligned struct kept per thread: the fields
    after the maps start from the template every call, and a map is re-pointed only when its tensor moved."""
    from portattn.kernels.forward import FwdParams
    from portattn.runtime import cuda_driver

    repointed, launched = [], []

    def launcher(*ready):
        def go(args_address: int, stream: int) -> None:  # the struct that the parameter array points at
            launched.append(FwdParams.from_address(ctypes.c_void_p.from_address(args_address).value))
        return go

    monkeypatch.setattr(cuda_driver, "set_tensor_map_address", lambda at, address, fn: repointed.append((at, address)))
    monkeypatch.setattr(cuda_driver, "launcher", launcher)
    maps = (("map_q", "q"), ("map_k", "k"), ("map_v", "v"))
    launch = loader.Launch(Target.for_arch("sm_90"), None, 1, 384, 0, FwdParams(batch=2, scale=0.5), tensor_maps=maps)

    def repointed_maps() -> list:
        base = ctypes.addressof(launched[-1])
        return [(at - base, address) for at, address in repointed]

    launch(7, q=0x1000, k=0x2000, v=0x3000, scale=1.0)
    assert ctypes.addressof(launched[-1]) % 128 == 0
    assert repointed_maps() == [(FwdParams.map_q.offset, 0x1000), (FwdParams.map_k.offset, 0x2000),
                                (FwdParams.map_v.offset, 0x3000)]
    assert (launched[-1].batch, launched[-1].scale, launched[-1].q) == (2, 1.0, 0x1000)
    repointed.clear()
    launch(7, q=0x1000, k=0x2000, v=0x3000)
    assert repointed == [] and launched[-1].scale == 0.5  # nothing moved; scale back to the template's
    launch(7, q=0x1000, k=0x4000, v=0x3000, scale=2.0)
    assert repointed_maps() == [(FwdParams.map_k.offset, 0x4000)] and launched[-1].k == 0x4000
    repointed.clear()
    other = threading.Thread(target=launch, args=(7,), kwargs=dict(q=0x1000, k=0x4000, v=0x3000))
    other.start()
    other.join()
    # the other thread's own struct, all maps
    assert len(repointed) == 3 and ctypes.addressof(launched[-1]) != ctypes.addressof(launched[-2])


def test_launches_can_start_from_a_template_of_the_call(monkeypatch):
    """``params_from``: the thread's struct becomes a copy of a call's own template (the decode family keeps one per
    call signature), whatever the previous call set on it; the launch sends that struct."""
    from portattn.kernels.decode import DecodeParams
    from portattn.runtime import cuda_driver

    launched = []

    def launcher(*ready):
        def go(args_address: int, stream: int) -> None:
            launched.append(DecodeParams.from_buffer_copy(
                DecodeParams.from_address(ctypes.c_void_p.from_address(args_address).value)))
        return go

    monkeypatch.setattr(cuda_driver, "launcher", launcher)
    launch = loader.Launch(Target.for_arch("sm_90"), None, 4, 64, 0, DecodeParams(batch=2, num_splits=3))
    short, long = DecodeParams(batch=2, num_splits=3, capacity=64), DecodeParams(batch=2, num_splits=3, capacity=4096)
    params = launch.params_from(ctypes.addressof(short))
    params.struct.q, params.struct.lse = 0x1000, 0x2000
    launch.send(params, 7)
    params = launch.params_from(ctypes.addressof(long))
    params.struct.q = 0x3000
    launch.send(params, 7)
    assert [(p.capacity, p.q, p.lse) for p in launched] == [(64, 0x1000, 0x2000), (4096, 0x3000, None)]
    assert ctypes.string_at(ctypes.addressof(short), ctypes.sizeof(short)) == bytes(
        DecodeParams(batch=2, num_splits=3, capacity=64))  # the templates stay as they were


def test_an_empty_grid_launches_nothing(monkeypatch):
    """A grid of no blocks (packed sequences without query rows) is not sent to the driver, which refuses it."""
    from portattn.kernels.forward import FwdParams
    from portattn.runtime import cuda_driver

    def refuse(*args, **kwargs):
        raise AssertionError("the driver was asked to launch an empty grid")

    monkeypatch.setattr(cuda_driver, "launcher", refuse)
    monkeypatch.setattr(cuda_driver, "launch", refuse)
    loader.Launch(Target.for_arch("sm_90"), None, 0, 128, 0, FwdParams(batch=2))(7, q=0x1000)
    loader.launch(Target.for_arch("sm_90"), None, (4, 0, 1), 128, 0, FwdParams(), 7)
    with pytest.raises(AssertionError, match="empty grid"):  # a grid with blocks does reach it
        loader.Launch(Target.for_arch("sm_90"), None, 1, 128, 0, FwdParams(batch=2))


def test_tensor_maps_must_lead_the_struct():
    class Late(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int64), ("m", ctypes.c_uint64 * 16)]

    with pytest.raises(ValueError, match="must be its first fields"):
        loader.Launch(Target.for_arch("sm_90"), None, 1, 128, 0, Late(), tensor_maps=(("m", "a"),))


@pytest.mark.gpu
@pytest.mark.skipif(torch.version.hip is not None, reason="tensor maps are NVIDIA's")
def test_tensor_maps_are_made_on_a_thread_without_a_current_context():
    """Autograd runs the backward on a thread of its own, which may have no current CUDA context: encoding a copy
    map and re-pointing it (driver calls that need one) make the device's context current for the call."""
    from cuda.bindings import driver

    from portattn.kernels.backward import BwdParams
    from portattn.kernels.variant import launch_target, set_tensor_maps
    from portattn.runtime import cuda_driver

    q, other = (torch.randn(2, 3, 100, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    target = launch_target(q.device)
    results = []

    def body() -> None:
        err, ctx = driver.cuCtxGetCurrent()
        while err == driver.CUresult.CUDA_SUCCESS and int(ctx):  # leave this thread without a current context
            driver.cuCtxPopCurrent()
            err, ctx = driver.cuCtxGetCurrent()
        try:
            p = cuda_driver.aligned_struct(BwdParams)
            set_tensor_maps(p, target, "bfloat16", {"map_q": (q, 64)})
            encoded = bytes(p.map_q)
            fn = SimpleNamespace(context=int(cuda_driver._primary_context(q.device.index)))
            cuda_driver.set_tensor_map_address(ctypes.addressof(p) + BwdParams.map_q.offset, other.data_ptr(), fn)
            after = driver.cuCtxGetCurrent()[1]
            results.append((encoded != bytes(128), bytes(p.map_q) != encoded, int(after)))
        except Exception as exc:  # reported by the test's own thread
            results.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert results == [(True, True, 0)]  # a map made, then moved; the thread is left as it was
