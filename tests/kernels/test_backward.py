"""The backward: gradients of q, k and v against float64 autograd and against SDPA's own backward in the same dtype,
on every target the machine executes (on NVIDIA: native 32-lane warps and the wave64 emulation)."""
from dataclasses import replace

import pytest
import torch

import portattn
from portattn.errors import UnsupportedTargetError
from portattn.kernels import backward
from portattn.kernels.variant import dtype_name
from portattn.ops import attention as attention_ops
from portattn.tools.reference import reference_attention, reference_gradients
from portattn.tools.testing import tweak_variant

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target")]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
HEAD_DIMS = (32, 64, 96, 128, 256)


def rand(gen, dtype, *shape):
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def max_rel(x: torch.Tensor, ref: torch.Tensor, largest: torch.Tensor | float | None = None) -> float:
    """The largest error relative to the largest gradient (``largest``, default the largest element of ``ref``);
    NaN anywhere gives NaN."""
    x64 = x.double()
    if bool(torch.isnan(x64).any()):
        return float("nan")
    largest = ref.abs().max() if largest is None else largest
    return float((x64 - ref).abs().max() / max(float(largest), 1e-30))


def sdpa_grads(q, k, v, dout, causal, scale):
    """SDPA's backward (its default backend choice) on the same inputs."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale,
                                                           enable_gqa=q.shape[1] != k.shape[1])
    return torch.autograd.grad(out, leaves, dout)


def portattn_grads(q, k, v, dout, causal=False, scale=None, deterministic=None):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = portattn.attention(*leaves, causal=causal, scale=scale, deterministic=deterministic)
    return torch.autograd.grad(out, leaves, dout)


# Allowed beyond twice SDPA's error. float32: the backward's delta = rowsum(dO * O) carries the rounding of the
# forward's float32 output (3xTF32, about 1e-6 relative) into dS, which SDPA's more precise float32 forward does not
# have; measured up to 7.2e-6 relative to the largest gradient (SDPA: up to 1e-6). 16-bit: the rounding of the
# exact gradient to the dtype (check adds it), because one sample's largest error can sit half an ulp either side of
# SDPA's (a bf16 dQ with atomic sums once measured 6.3e-3 against SDPA's 2.9e-3).
SLACK = {torch.float32: 1e-5, torch.float16: 1e-6, torch.bfloat16: 1e-6}
# Without SDPA to compare with (scales SDPA does not take the same way, the LSE's gradient): errors relative to the
# largest gradient. float32: as above, plus grouped-query sums over several heads (seen up to 1.3e-5).
TOL = {torch.float32: 3e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def rounded_output_gradients(q, k, v, dout, causal, scale):
    """What the rounding of the forward's output costs the exact gradients: every backward (SDPA's too) reads delta =
    rowsum(dO * O) from the stored output O, and an error e in it shifts dS by -P * rowsum(dO * e), as an LSE
    gradient of -rowsum(dO * e) does. Where one key takes most of a row's weight, the rounding of that row's O to a
    16-bit type so reaches dQ and dK at several times the dtype's own rounding, and which way a kernel's output
    rounds there is chance. Returns the float64 gradients a backward gets from the exact output rounded to the
    dtype."""
    exact, _ = reference_attention(q, k, v, causal, scale)
    shift = (dout.double() * (exact.to(q.dtype).double() - exact)).sum(-1)
    return reference_gradients(q, k, v, dout, causal, scale, grad_lse=-shift)


def check(q, k, v, causal=False, scale=None, against_sdpa=True, gen=None):
    """portattn's gradient errors against float64 at most twice SDPA's backward's (plus SLACK, the rounding of the
    exact gradient to the dtype, and what the rounding of the forward's output costs through delta)."""
    dout = torch.randn(q.shape, device="cuda", generator=gen).to(q.dtype)
    refs = reference_gradients(q, k, v, dout, causal, scale)
    got = portattn_grads(q, k, v, dout, causal, scale)
    sdpa = sdpa_grads(q, k, v, dout, causal, scale) if against_sdpa else None
    rounded = rounded_output_gradients(q, k, v, dout, causal, scale) if against_sdpa else None
    largest = max(float(r.abs().max()) for r in refs)  # errors are relative to the largest gradient
    for i, name in enumerate(("dq", "dk", "dv")):
        assert got[i].shape == refs[i].shape and got[i].dtype == q.dtype
        err = max_rel(got[i], refs[i], largest)
        assert err == err, f"NaN in {name}"
        if sdpa is not None:
            sdpa_err = max_rel(sdpa[i], refs[i], largest)
            rounding = 0.0 if q.dtype == torch.float32 else max_rel(refs[i].to(q.dtype), refs[i], largest)
            from_output = max_rel(rounded[i], refs[i], largest)
            bound = 2 * sdpa_err + SLACK[q.dtype] + rounding + from_output
            assert err <= bound, (f"{name}: portattn {err:.3e} vs SDPA {sdpa_err:.3e} (bound {bound:.3e}, of it "
                                  f"{from_output:.3e} from the output's rounding)")
        else:
            assert err <= TOL[q.dtype], (name, err)


@pytest.fixture
def needs_backward(on_target, request):
    def need(dtype, d=64):
        if not backward.has_kernel(on_target, dtype, d):
            pytest.skip(f"no backward kernel for {on_target}, {dtype}, d={d}")
    return need


@pytest.mark.parametrize("nq,nk", [(1, 1), (17, 17), (200, 200), (130, 333), (333, 130)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_gradients(gen, needs_backward, dtype, d, causal, nq, nk):
    needs_backward(dtype, d)
    q = rand(gen, dtype, 2, 3, nq, d)
    k, v = rand(gen, dtype, 2, 3, nk, d), rand(gen, dtype, 2, 3, nk, d)
    check(q, k, v, causal=causal, gen=gen)


@pytest.mark.parametrize("n", [1024, 4097])
@pytest.mark.parametrize("d", [64, 96, 128, 256])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_long_causal(gen, needs_backward, dtype, d, n):
    needs_backward(dtype, d)
    q, k, v = (rand(gen, dtype, 1, 2, n, d) for _ in range(3))
    check(q, k, v, causal=True, gen=gen)


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1)])
@pytest.mark.parametrize("d", [96, 128, 256])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_grouped_query_bshd_views_and_scale(gen, needs_backward, dtype, d, hq, hk):
    """dK and dV sum over each group of query heads; BSHD .transpose(1, 2) views are read in place."""
    needs_backward(dtype, d)
    b, n = 2, 257
    q = rand(gen, dtype, b, n, hq, d).transpose(1, 2)
    k, v = (rand(gen, dtype, b, n + 30, hk, d).transpose(1, 2) for _ in range(2))
    check(q, k, v, causal=True, gen=gen)
    check(q, k, v, scale=0.3, against_sdpa=False, gen=gen)


@pytest.mark.parametrize("scale", [-0.3, 0.0])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_negative_and_zero_scale(gen, needs_backward, dtype, scale):
    needs_backward(dtype)
    q, k, v = (rand(gen, dtype, 1, 2, 150, 64) for _ in range(3))
    for causal in (False, True):
        check(q, k, v, causal=causal, scale=scale, against_sdpa=False, gen=gen)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_lse_gradient(gen, needs_backward, dtype):
    """A loss that uses the returned LSE: its gradient flows into q and k."""
    needs_backward(dtype)
    q, k, v = (rand(gen, dtype, 2, 2, 190, 64) for _ in range(3))
    dout = rand(gen, dtype, 2, 2, 190, 64)
    grad_lse = torch.randn(2, 2, 190, device="cuda", generator=gen)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = portattn.attention(*leaves, causal=True, return_lse=True)
    got = torch.autograd.grad((out, lse), leaves, (dout, grad_lse))
    refs = reference_gradients(q, k, v, dout, True, None, grad_lse)
    tol = TOL[dtype]
    largest = max(float(r.abs().max()) for r in refs)
    for name, g, ref in zip(("dq", "dk", "dv"), got, refs):
        assert max_rel(g, ref, largest) <= tol, (name, max_rel(g, ref, largest))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_other_query_tiles_through_tweak_variant(gen, needs_backward, on_target, dtype):
    """tweak_variant reaches the backward's kernels: the warpgroup-MMA dK/dV kernel at d = 128 on 32-query tiles
    (dQ computed transposed, as at d = 256) instead of its 64-query row, with partial tiles, Nq != Nk and grouped
    heads."""
    needs_backward(dtype, 128)
    default = backward.select(on_target, dtype_name(dtype), 128).dkdv
    if not default.tile.warpgroup_mma:
        pytest.skip(f"{on_target} has no warpgroup-MMA backward")
    chosen = []

    def smaller_tiles(spec):
        if isinstance(spec, backward.BwdSpec) and spec.stage == "dkdv":
            spec = replace(spec, tile=replace(spec.tile, block_m=32))
        chosen.append(spec)
        return spec

    q = rand(gen, dtype, 2, 4, 150, 128)
    k, v = (rand(gen, dtype, 2, 2, 201, 128) for _ in range(2))
    with tweak_variant(smaller_tiles):
        for causal in (False, True):
            check(q, k, v, causal=causal, gen=gen)
    assert any(isinstance(s, backward.BwdSpec) and s.stage == "dkdv" and s.tile.block_m == 32 for s in chosen)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_nan_follows_reference(gen, needs_backward, dtype):
    """A NaN in v reaches every output row of its head and so delta: dQ and dK are NaN where float64's are (all of
    that head's), and dV, which does not read v, stays finite and right."""
    needs_backward(dtype, 64)
    q, k, v, dout = (rand(gen, dtype, 1, 2, 70, 64) for _ in range(4))
    v[0, 1, 20, 7] = float("nan")
    got = portattn_grads(q, k, v, dout)
    refs = reference_gradients(q, k, v, dout)
    for name, g, ref in zip(("dq", "dk", "dv"), got, refs):
        assert torch.equal(torch.isnan(g), torch.isnan(ref)), name
    assert bool(torch.isnan(refs[0][0, 1]).all()) and not bool(torch.isnan(refs[0][0, 0]).any())
    assert max_rel(got[2], refs[2]) <= TOL[dtype]


@pytest.mark.parametrize("option,define,d", [("qk_unroll_all", "PA_QK_UNROLL_ALL", 64),
                                             ("qk_unroll_all", "PA_QK_UNROLL_ALL", 128),
                                             ("kv_split", "PA_KV_SPLIT", 32), ("kv_split", "PA_KV_SPLIT", 64),
                                             ("dq_single", "PA_DQ_SINGLE", 64)])
def test_float32_tile_options_give_the_same_bits(gen, needs_backward, on_target, option, define, d):
    """The float32 dK/dV kernel with and without a tile option: ``qk_unroll_all`` (the loops of Sᵀ and dPᵀ over the
    head dim unrolled whole, not two steps at a time), ``kv_split`` (K and V split into their TF32 parts once per
    block, not on every load) and ``dq_single`` (dQ's units one at a time, not in pairs). The products run in the same
    order on the same bits, so the deterministic gradients are equal bit for bit; both builds' gradients,
    deterministic and with dQ's atomic sums, are right. The operators are called in this thread, where tweak_variant
    applies."""
    needs_backward(torch.float32, d)
    dkdv = backward.select(on_target, "float32", d).dkdv
    if option == "dq_single" and dkdv.kernel != "mma":
        pytest.skip("dQ's units are paired only in the matrix-unit dK/dV kernel")
    if option == "kv_split":
        if not dkdv.tf32_split:
            pytest.skip("K and V are split into TF32 parts only where float32 runs as 3xTF32")
        try:
            replace(dkdv, tile=replace(dkdv.tile, kv_split=True)).check_fits(on_target)
        except UnsupportedTargetError as exc:
            pytest.skip(str(exc))
    q = rand(gen, torch.float32, 2, 4, 150, d)
    k, v = (rand(gen, torch.float32, 2, 2, 201, d) for _ in range(2))
    dout = rand(gen, torch.float32, 2, 4, 150, d)
    masks = attention_ops.NO_MASKS
    out, lse = torch.ops.portattn.attention(q, k, v, True, d ** -0.5, True, True, *masks)
    refs = reference_gradients(q, k, v, dout, True)
    largest = max(float(r.abs().max()) for r in refs)
    grads, built = {}, set()
    for on in (False, True):
        def tweak(spec, on=on):
            if isinstance(spec, backward.BwdSpec) and spec.stage == "dkdv":
                spec = replace(spec, tile=replace(spec.tile, **{option: on}))
                built.add(spec.defines.get(define, 0))
            return spec
        with tweak_variant(tweak):
            for deterministic in (True, False):
                grads[on, deterministic] = torch.ops.portattn.attention_backward(
                    dout, q, k, v, out, lse, None, True, d ** -0.5, deterministic, *masks)
                assert all(max_rel(g, r, largest) <= TOL[torch.float32]
                           for g, r in zip(grads[on, deterministic], refs)), (on, deterministic)
    assert built == {0, 1}, "both builds reached the kernel"
    assert all(torch.equal(a, b) for a, b in zip(grads[False, True], grads[True, True]))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_deterministic_gradients_are_bitwise_repeatable(gen, needs_backward, dtype):
    needs_backward(dtype, 128)
    q = rand(gen, dtype, 2, 8, 700, 128)
    k, v = rand(gen, dtype, 2, 2, 900, 128), rand(gen, dtype, 2, 2, 900, 128)
    dout = rand(gen, dtype, 2, 8, 700, 128)
    first = portattn_grads(q, k, v, dout, causal=True, deterministic=True)
    second = portattn_grads(q, k, v, dout, causal=True, deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    atomic = portattn_grads(q, k, v, dout, causal=True, deterministic=False)
    refs = reference_gradients(q, k, v, dout, True)
    largest = max(float(r.abs().max()) for r in refs)
    for a, b, ref in zip(first, atomic, refs):
        ea, eb = max_rel(a, ref, largest), max_rel(b, ref, largest)
        assert ea <= 2 * eb + 1e-6 and eb <= 2 * ea + 1e-6, (ea, eb)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_eager_path_matches_the_operator_bit_for_bit(gen, needs_backward, dtype):
    """An eager call on plain tensors skips the dispatcher (``_EagerAttention``); with deterministic gradients it gives
    the operator's output, LSE and gradients (the LSE's own gradient included) bit for bit, and it refuses a
    double backward as the operator does."""
    needs_backward(dtype)
    q, k, v = (rand(gen, dtype, 2, 4, 150, 64) for _ in range(3))
    dout, grad_lse = rand(gen, dtype, 2, 4, 150, 64), torch.randn(2, 4, 150, device="cuda", generator=gen)
    results = []
    for via_operator in (False, True):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        if via_operator:
            out, lse = torch.ops.portattn.attention(*leaves, True, 0.125, True, True, *attention_ops.NO_MASKS)
        else:
            out, lse = portattn.attention(*leaves, causal=True, scale=0.125, return_lse=True, deterministic=True)
            assert type(out.grad_fn).__name__ == "_EagerAttentionBackward"
        results.append((out, lse, *torch.autograd.grad((out, lse), leaves, (dout, grad_lse))))
    assert all(torch.equal(a, b) for a, b in zip(*results))
    leaf = q.clone().requires_grad_()
    (grad_q,) = torch.autograd.grad(portattn.attention(leaf, k, v).sum(), leaf, create_graph=True)
    with pytest.raises(NotImplementedError, match="no double backward"):
        grad_q.sum().backward()


def test_backward_runs_for_the_calls_target(gen, needs_backward, on_target, monkeypatch):
    """The autograd engine runs the backward of GPU tensors on a thread of its own: it still launches for the target
    of the forward's call (the wave64 emulation included), through the eager path and through the operator."""
    needs_backward(torch.float16)
    seen = []
    real = backward.launch_target
    monkeypatch.setattr(backward, "launch_target", lambda device: seen.append(real(device)) or seen[-1])
    q, k, v = (rand(gen, torch.float16, 1, 3, 71, 64) for _ in range(3))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, _ = torch.ops.portattn.attention(*leaves, False, 0.125, True, False, *attention_ops.NO_MASKS)
    torch.autograd.grad(out, leaves, torch.ones_like(out))
    assert seen == [on_target]
    out = portattn.attention(*leaves, scale=0.0625)  # a signature of this test's own: its first backward plans
    assert type(out.grad_fn).__name__ == "_EagerAttentionBackward"
    torch.autograd.grad(out, leaves, torch.ones_like(out))
    assert seen == [on_target, on_target]


def test_torch_deterministic_setting_is_followed(gen, needs_backward):
    needs_backward(torch.float16)
    q, k, v = (rand(gen, torch.float16, 1, 4, 300, 64) for _ in range(3))
    dout = rand(gen, torch.float16, 1, 4, 300, 64)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [portattn_grads(q, k, v, dout) for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(previous)
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_extra_memory_is_linear_in_sequence_length(gen, needs_backward, on_target):
    """The forward keeps the LSE, never the N x N matrix: the backward's peak memory beyond its inputs and outputs is
    a few [batch, heads, N, d] float32 buffers."""
    if on_target.emulated:
        pytest.skip("memory is the same on both lane mappings; measured once")
    needs_backward(torch.bfloat16, 128)
    b, h, n, d = 1, 8, 8192, 128
    q, k, v = (rand(gen, torch.bfloat16, b, h, n, d).requires_grad_() for _ in range(3))
    out = portattn.attention(q, k, v, causal=True)
    dout = torch.randn_like(out)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out.backward(dout)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    grads = 3 * q.numel() * q.element_size()
    assert extra <= grads + 2 * b * h * n * d * 4 + (1 << 20), f"{extra / 2**20:.0f} MiB beyond the inputs"
    assert extra < b * h * n * n * 2 / 4, "as large as the attention matrix"
