"""The decode benchmark's timing: input copies against the L2 cache and alternating rounds (no GPU needed), and one
small cell (GPU)."""
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


@pytest.mark.gpu
def test_decode_cell_times_every_call_and_checks_the_answer():
    row = bench.bench_decode_case("bfloat16", 64, 8, 2, 2, 1024, reps=3)
    assert row.max_rel_error < 1e-2
    for name in ("portattn", "portattn paged", "SDPA default"):
        assert row.kernel_us[name] > 0 and row.eager_us[name] > 0
    assert row.bytes == 2 * 2 * 1024 * 2 * 64 * 2 and row.gbps("portattn") > 0
    assert set(row.kernel_us) == set(row.eager_us)
