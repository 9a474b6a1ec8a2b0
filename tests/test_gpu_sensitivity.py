"""The suite can fail: a kernel variant with a planted wave32 assumption (row reductions that stop at 32 lanes)
passes on 32-lane waves but must fail the parity check when the 64-lane mapping is executed."""
from dataclasses import replace

import pytest

from portattn.select import KernelSpec
from portattn.testing import tweak_variant, use_kernel, use_target

from conftest import TARGETS
from test_gpu_parity import TOL, VECTORS, vector_errors

pytestmark = pytest.mark.gpu
PLANTED_BUG = (("PA_TESTING_WAVE32_REDUCTION_BUG", 1),)
# Row groups as wide as a wave, so that the row max / sum reductions span every lane of it.
WAVE_WIDE = [v for v in VECTORS if v["q"].shape[-1] % 64 == 0]


def wave_wide_rows(lanes: int, planted: bool):
    def tweak(spec: KernelSpec) -> KernelSpec:
        tile = replace(spec.tile, block_m=32, block_n=64, row_lanes=lanes)
        return replace(spec, tile=tile, test_defines=PLANTED_BUG if planted else ())
    return tweak


def errors(target, planted: bool) -> dict[str, float]:
    with use_target(target), use_kernel("simt"), tweak_variant(wave_wide_rows(target.lanes, planted)):
        return {v["name"]: max(vector_errors(v, next(iter(TOL)))) for v in WAVE_WIDE}


@pytest.mark.skipif(not any(t.lanes == 64 for t in TARGETS), reason="no 64-lane target on this machine")
def test_planted_wave32_bug_fails_on_64_lanes():
    target = next(t for t in TARGETS if t.lanes == 64)
    tol = next(iter(TOL.values()))
    good = errors(target, planted=False)
    assert all(e <= tol for e in good.values()), f"correct kernel: {good}"
    bad = errors(target, planted=True)
    # Lanes 32..63 never see the maxima and sums of lanes 0..31 (nor the reverse): every vector must be caught.
    missed = {name: e for name, e in bad.items() if e <= tol}  # a NaN counts as caught
    assert not missed, f"the planted wave32 bug passed the parity check on {missed}"


@pytest.mark.skipif(not any(t.lanes == 32 for t in TARGETS), reason="no 32-lane target on this machine")
def test_planted_bug_is_harmless_on_32_lanes():
    target = next(t for t in TARGETS if t.lanes == 32)
    tol = next(iter(TOL.values()))
    bad = errors(target, planted=True)
    assert all(e <= tol for e in bad.values()), bad
