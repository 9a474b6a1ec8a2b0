"""The benchmarks' timing: input copies against the L2 cache, alternating and interleaved rounds, the settling before
each run of timed launches (no GPU needed), and one small decode cell (GPU)."""
import types

import pytest
import torch

from portattn.tools import bench


def test_input_copies_exceed_three_l2_caches_within_bounds(monkeypatch):
    props = types.SimpleNamespace(L2_cache_size=50 << 20)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    assert bench.input_copies(1 << 40) == 1
    assert bench.input_copies(100 << 20) == 2  # 200 MiB > 150 MiB
    assert bench.input_copies(16 << 20) == 10
    assert bench.input_copies(1 << 10) == bench.MAX_INPUT_COPIES
    props.L2_cache_size = 0  # unknown: taken as 64 MiB
    assert bench.input_copies(64 << 20) == 3


def test_alternating_rounds_take_each_calls_best_round_after_a_warm_up(monkeypatch):
    order, times = [], {"a": [9.0, 5.0, 7.0, 6.0], "b": [1.0, 4.0, 3.0, 8.0]}

    def fake_time_ms(fn, reps, warmup):
        name = fn()
        order.append(name)
        return times[name][sum(1 for n in order if n == name) - 1]

    monkeypatch.setattr(bench, "time_ms", fake_time_ms)
    best = bench.alternating_ms({"a": lambda: "a", "b": lambda: "b"}, reps=4, rounds=3)
    assert order == ["a", "b"] * 4  # in turn, round by round
    assert best == {"a": 5.0, "b": 3.0}  # the warm-up round (a: 9, b: 1) does not count


def test_interleaved_rounds_take_the_median_of_every_round(monkeypatch):
    calls, rounds = [], {"a": [[5.0, 1.0], [9.0, 2.0], [3.0, 4.0]], "b": [[7.0, 7.0], [1.0, 2.0], [8.0, 8.0]]}

    def fake_samples_ms(fn, reps, warmup, settle_ms):
        name = fn()
        calls.append((name, reps, warmup))
        assert settle_ms == bench.SETTLE_MS
        return rounds[name][sum(1 for n, _, _ in calls if n == name) - 1]

    warmed = []
    monkeypatch.setattr(bench, "samples_ms", fake_samples_ms)
    ms = bench.interleaved_ms({"a": lambda: warmed.append("a") or "a", "b": lambda: warmed.append("b") or "b"},
                              reps=5, warmup=2, rounds=3)
    assert warmed[:4] == ["a", "a", "b", "b"]  # each call warmed up before any timing
    assert calls == [("a", 2, 0), ("b", 2, 0)] * 3  # in turn, round by round, ceil(5 / 3) runs each
    assert ms == {"a": 3.5, "b": 7.0}  # the median of all six runs of each


class _FakeEvent:
    """A CUDA event whose elapsed time to any other is ``ms``."""

    ms = 0.0

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def elapsed_time(self, end):
        return self.ms


@pytest.mark.parametrize("call_ms,calls", [(10.0, 10), (30.0, 4), (250.0, 1), (1e-3, bench.SETTLE_MAX_CALLS)])
def test_settle_runs_the_call_for_about_its_time(monkeypatch, call_ms, calls):
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(_FakeEvent, "ms", call_ms)
    ran = []
    bench.settle(lambda: ran.append(1), ms=100.0)
    assert len(ran) == calls  # the timed first call included


def test_each_run_of_timed_launches_settles_first(monkeypatch):
    settled = []
    monkeypatch.setattr(bench, "settle", lambda fn, ms: settled.append((fn(), ms)))
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(_FakeEvent, "ms", 2.0)
    assert bench.samples_ms(lambda: "a", reps=3, warmup=1) == [2.0] * 3
    assert settled == [("a", bench.SETTLE_MS)]
    bench.samples_ms(lambda: "b", reps=3, warmup=1, settle_ms=0)
    assert settled == [("a", bench.SETTLE_MS)]  # settle_ms=0: none


@pytest.mark.gpu
def test_decode_cell_times_every_call_and_checks_the_answer():
    row = bench.bench_decode_case("bfloat16", 64, 8, 2, 2, 1024, reps=3)
    assert row.max_rel_error < 1e-2
    for name in ("portattn", "portattn paged", "SDPA default"):
        assert row.kernel_us[name] > 0 and row.eager_us[name] > 0
    assert row.bytes == 2 * 2 * 1024 * 2 * 64 * 2 and row.gbps("portattn") > 0
    assert set(row.kernel_us) == set(row.eager_us)


@pytest.mark.gpu
def test_forward_cell_times_every_backend_that_takes_the_call():
    row = bench.bench_case("bfloat16", 64, True, 256, heads=4, tokens=512, reps=3, warmup=1, heads_kv=2)
    assert row.max_rel_error < 1e-2 and row.portattn_ms > 0 and row.portattn_tflops > 0
    assert set(row.sdpa_tflops) == set(bench.SDPA_BACKENDS) and row.sdpa_tflops["default"] > 0
    assert all(t is None or t > 0 for t in row.sdpa_tflops.values())
