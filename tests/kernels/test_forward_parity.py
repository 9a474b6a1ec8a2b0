"""Golden parity vectors (tests/parity/) on every target the machine executes, the targets against each other on
fresh random inputs, and the proof that these checks can fail: a kernel variant with a planted wave32 assumption
(row reductions that stop at 32 lanes) passes on 32-lane waves but must fail when the 64-lane mapping runs."""
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import portattn
from portattn.kernels.forward import KernelSpec, has_kernel
from portattn.tools.reference import reference_attention, relative_error
from portattn.tools.testing import tweak_variant, use_kernel, use_target

pytestmark = pytest.mark.gpu
TARGETS = portattn.available_targets()
VECTORS = torch.load(Path(__file__).parent / "parity" / "vectors.pt", weights_only=True)
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def run_vector(vec: dict, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = (vec[name].to("cuda", dtype) for name in "qkv")
    out = torch.full_like(q, float("nan"))
    _, lse = portattn.attention(q, k, v, causal=vec["causal"], scale=vec["scale"], return_lse=True, out=out)
    return out, lse


def vector_errors(vec: dict, dtype: torch.dtype) -> tuple[float, float]:
    out, lse = run_vector(vec, dtype)
    return relative_error(out, vec["out"].cuda()), relative_error(lse, vec["lse"].cuda())


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("vec", VECTORS, ids=[v["name"] for v in VECTORS])
def test_golden_vector(on_target, vec, dtype):
    if not has_kernel(on_target, dtype):
        pytest.skip(f"no {dtype} kernel for {on_target} yet")
    err, lse_err = vector_errors(vec, dtype)
    assert err <= TOL[dtype] and lse_err <= TOL[dtype], f"{vec['name']}: out {err:.2e}, lse {lse_err:.2e}"


def test_every_lane_mapping_is_executed():
    """The 64-lane (AMD) mapping runs on every GPU machine: natively on AMD, emulated on NVIDIA, beside the
    native 32-lane one there."""
    lanes = {t.lanes for t in TARGETS}
    assert 64 in lanes and all(t.lanes == 32 or t.lanes == 64 for t in TARGETS)


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("d,nq,nk,hq,hk,causal", [
    (32, 333, 333, 4, 2, True), (64, 1000, 517, 2, 2, False), (96, 77, 1025, 3, 1, True),
    (128, 700, 700, 4, 4, True), (256, 129, 300, 2, 1, False),
])
def test_targets_agree(gen, dtype, d, nq, nk, hq, hk, causal):
    q = torch.randn(2, hq, nq, d, device="cuda", generator=gen).to(dtype)
    k, v = (torch.randn(2, hk, nk, d, device="cuda", generator=gen).to(dtype) for _ in range(2))
    ref, _ = reference_attention(q, k, v, causal)
    outs = []
    for target in (t for t in TARGETS if has_kernel(t, dtype)):
        with use_target(target):
            out = torch.full_like(q, float("nan"))
            portattn.attention(q, k, v, causal=causal, out=out)
        assert relative_error(out, ref) <= TOL[dtype], str(target)
        outs.append(out)
    for other in outs[1:]:
        assert relative_error(other, outs[0].double()) <= 2 * TOL[dtype]


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
