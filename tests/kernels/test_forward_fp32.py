"""fp32 attention on the GPU against the float64 reference, on every target the machine executes and with each
float32 kernel (the selector's choice, the matrix-unit kernel where that is another one, simt)."""
import math

import pytest
import torch

import portattn
from portattn.kernels.forward import select
from portattn.tools.reference import reference_attention, relative_error
from portattn.tools.testing import tweak_variant, use_kernel

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target", "fp32_kernel")]
TOL = 1e-5
HEAD_DIMS = (32, 64, 96, 128, 256)


@pytest.fixture(params=["default", "mma", "simt"])
def fp32_kernel(request, on_target):
    """Every test runs on the selector's choice (the warp-specialized kernel or the matrix units where the tables
    have a row), with the matrix-unit kernel in place of the warp-specialized one (Hopper, d = 64 and 128: it still
    takes the masked calls), and on the simt kernel."""
    if request.param == "default":
        yield request.param
    elif request.param == "mma":
        def matrix_unit(spec):
            return select(on_target, spec.dtype, spec.head_dim, "mma") if spec.kernel == "ws" else spec

        with tweak_variant(matrix_unit):
            yield request.param
    else:
        with use_kernel(request.param):
            yield request.param


def rand(gen, *shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen)


def check(q, k, v, causal=False, scale=None):
    out = torch.full_like(q, float("nan"))
    res, lse = portattn.attention(q, k, v, causal=causal, scale=scale, return_lse=True, out=out)
    assert res is out
    ref, ref_lse = reference_attention(q, k, v, causal, scale)
    err, lse_err = relative_error(out, ref), relative_error(lse, ref_lse)
    assert err <= TOL, f"output relative error {err}"
    # An LSE near zero (a row that sees one key: one scaled dot product) makes its relative error ill-conditioned;
    # its error in log units is the relative error of the row's normalizer, and is held to the same bound.
    lse_abs = (lse.double() - ref_lse.double()).abs().max().item()
    assert lse_err <= TOL or lse_abs <= TOL, f"lse relative error {lse_err}, largest error in log units {lse_abs}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 17, 128, 1000, 4097])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_square(gen, d, n, causal):
    b, h = (2, 3) if n <= 1000 else (1, 2)
    check(rand(gen, b, h, n, d), rand(gen, b, h, n, d), rand(gen, b, h, n, d), causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq,nk", [(17, 1000), (1000, 17), (1, 128), (128, 4097), (4097, 130)])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_nq_ne_nk(gen, d, nq, nk, causal):
    check(rand(gen, 1, 2, nq, d), rand(gen, 1, 2, nk, d), rand(gen, 1, 2, nk, d), causal)


@pytest.mark.parametrize("d", [64, 128])
def test_long_sums_keep_float32_accuracy(gen, d):
    """Outputs summing many terms of one sign (V far from zero) over 8192 keys: a running output sum kept in the
    matrix unit's accumulators, whose additions truncate, drifts to about 1e-4 here."""
    q, k, v = (rand(gen, 1, 2, 8192, d) for _ in range(3))
    check(q, k, v + 3.0)


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1)])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa(gen, hq, hk, d, causal):
    check(rand(gen, 2, hq, 300, d), rand(gen, 2, hk, 333, d), rand(gen, 2, hk, 333, d), causal)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_bshd_views_read_in_place(gen, d):
    b, n, h = 2, 257, 4
    q, k, v = (rand(gen, b, n, h, d).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    check(q, k, v, causal=True)
    out = portattn.attention(q, k, v)
    assert out.stride() == q.stride(), "output keeps the query's layout"


def test_unaligned_strides_are_copied(gen):
    q, k, v = (rand(gen, 2, 3, 100, 65)[..., :64] for _ in range(3))
    check(q, k, v)


def test_misaligned_base_pointer_is_copied(gen):
    n = 2 * 3 * 50 * 64
    q, k, v = (rand(gen, n + 1)[1:].view(2, 3, 50, 64) for _ in range(3))
    assert q.is_contiguous() and q.data_ptr() % 16 != 0
    check(q, k, v, causal=True)


def test_custom_scale(gen):
    q, k, v = (rand(gen, 1, 2, 200, 64) for _ in range(3))
    check(q, k, v, scale=0.3)
    check(q, k, v, causal=True, scale=1.7)


def test_default_out_and_sdpa_entry(gen):
    q, k, v = (rand(gen, 2, 4, 129, 128) for _ in range(3))
    ref, _ = reference_attention(q, k, v, True)
    assert relative_error(portattn.attention(q, k, v, causal=True), ref) <= TOL
    assert relative_error(portattn.scaled_dot_product_attention(q, k, v, is_causal=True), ref) <= TOL
    kg, vg = k[:, :2], v[:, :2]
    ref, _ = reference_attention(q, kg, vg)
    assert relative_error(portattn.scaled_dot_product_attention(q, kg, vg, enable_gqa=True), ref) <= TOL


def test_empty_shapes():
    z = torch.empty(0, 2, 5, 64, device="cuda")
    assert portattn.attention(z, z, z).shape == (0, 2, 5, 64)
    q = torch.randn(1, 2, 0, 64, device="cuda")
    k = torch.randn(1, 2, 7, 64, device="cuda")
    assert portattn.attention(q, k, k).shape == (1, 2, 0, 64)
    q = torch.randn(1, 2, 3, 64, device="cuda")
    e = torch.empty(1, 2, 0, 64, device="cuda")
    out, lse = portattn.attention(q, e, e, return_lse=True)
    assert torch.equal(out, torch.zeros_like(q)) and bool((lse == -math.inf).all())


def check_non_finite(q, k, v):
    out = portattn.attention(q, k, v)
    ref, _ = reference_attention(q, k, v)
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(out), finite)
    assert relative_error(out[finite], ref[finite]) <= TOL


def test_nan_follows_reference(gen):
    q, k, v = (rand(gen, 1, 2, 70, 64) for _ in range(3))
    q[0, 0, 3, 5] = float("nan")
    k[0, 1, 10, 0] = float("nan")
    v[0, 0, 20, 7] = float("nan")
    check_non_finite(q, k, v)


def test_inf_follows_reference(gen, on_target, fp32_kernel):
    spec = select(on_target, "float32", 64, None if fp32_kernel == "default" else fp32_kernel)
    if not spec.ieee_infinities:
        pytest.skip(f"{spec.label} does not propagate infinite inputs like IEEE arithmetic (docs/design.md)")
    q, k, v = (rand(gen, 1, 2, 70, 64) for _ in range(3))
    k[0, 1, 10, 0] = float("inf")
    v[0, 0, 20, 7] = float("-inf")
    check_non_finite(q, k, v)


def test_device_mismatch_is_rejected():
    q = torch.randn(1, 1, 4, 64, device="cuda")
    with pytest.raises(ValueError, match="k is on cpu"):
        portattn.attention(q, q.cpu(), q)


def test_runs_on_current_stream(gen):
    q, k, v = (rand(gen, 4, 8, 1024, 64) for _ in range(3))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(s):
        out = torch.full_like(q, float("nan"))
        portattn.attention(q, k, v, out=out)
        res = out * 1  # ordered after the kernel on s
    s.synchronize()
    ref, _ = reference_attention(q, k, v)
    assert relative_error(res, ref) <= TOL
