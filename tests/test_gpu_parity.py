"""Golden parity vectors (tests/parity/) on every target the machine executes, and the targets against each other
on fresh random inputs."""
from pathlib import Path

import pytest
import torch

import portattn
from portattn.reference import reference_attention, relative_error
from portattn.testing import use_target

from conftest import TARGETS, has_kernel

pytestmark = pytest.mark.gpu
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
    """On NVIDIA the suite must run the emulated 64-lane (AMD) mapping as well as the native one."""
    lanes = sorted(t.lanes for t in TARGETS)
    assert lanes == ([32, 64] if TARGETS[0].vendor == "cuda" else [TARGETS[0].lanes])


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
