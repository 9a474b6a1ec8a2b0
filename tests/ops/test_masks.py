"""Masks and score modifiers (windows, bottom-right alignment, softcap, ALiBi, attention-mask tensors), packed
variable-length batches and the flash-attn functions: outputs, LSE and gradients against float64 on every target the
machine executes (on NVIDIA: native 32-lane warps and the wave64 emulation)."""
import math
import os
import random

import pytest
import torch
import torch.nn.functional as F

import portattn
from portattn.flash_attn import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)
from portattn.kernels import backward
from portattn.kernels.variant import HEAD_DIMS
from portattn.tools.reference import reference_masked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target")]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Output and LSE: largest error relative to the largest reference value; gradients: relative to the largest gradient.
OUT_TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
GRAD_TOL = {torch.float32: 5e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def rand(gen, dtype, *shape):
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def max_rel(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(x), finite), "infinite or NaN entries differ from the reference"
    if not bool(finite.any()):
        return 0.0
    return float((x - ref)[finite].abs().max() / max(float(ref[finite].abs().max()), 1e-30))


def assert_grads(got, refs, dtype, *what):
    """Each gradient's largest error, relative to the largest reference gradient, within GRAD_TOL (an empty
    gradient, of a sequence without rows, is not checked)."""
    largest = max((float(r.abs().max()) for r in refs if r.numel()), default=0.0)
    for name, g, r in zip(("dq", "dk", "dv"), got, refs):
        if r.numel():
            err = float((g.double() - r).abs().max()) / max(largest, 1e-30)
            assert err <= GRAD_TOL[dtype], (*what, name, err)


def check_attention(q, k, v, gen, grads=True, **opts):
    """portattn.attention(**opts) against reference_masked: output, LSE and (with ``grads``) dq, dk, dv."""
    ref_opts = {key: opts[key] for key in ("causal", "softcap", "alibi_slopes", "attn_mask", "scale") if key in opts}
    ref_opts["bottom_right"] = opts.get("causal_align") == "bottom-right"
    ref_opts["window"] = opts.get("window") or (-1, -1)
    leaves64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = reference_masked(*leaves64, **ref_opts)
    leaves = [t.detach().clone().requires_grad_(grads) for t in (q, k, v)]
    out, lse = portattn.attention(*leaves, return_lse=True, **opts)
    tol = OUT_TOL[q.dtype]
    assert max_rel(out, ref_out) <= tol, ("out", max_rel(out, ref_out))
    assert max_rel(lse, ref_lse) <= tol, ("lse", max_rel(lse, ref_lse))
    if not grads:
        return
    dout = rand(gen, q.dtype, *q.shape)
    got = torch.autograd.grad(out, leaves, dout)
    assert_grads(got, torch.autograd.grad(ref_out, leaves64, dout.double()), q.dtype)


@pytest.fixture
def needs_backward(on_target):
    def need(dtype, d=64):
        if not backward.has_kernel(on_target, dtype, d):
            pytest.skip(f"no backward kernel for {on_target}, {dtype}, d={d}")
    return need


MASKS = {
    "bottom-right causal": dict(causal=True, causal_align="bottom-right"),
    "window": dict(window=(37, 5)),
    "causal window": dict(causal=True, window=(64, -1), causal_align="bottom-right"),
    "left only": dict(window=(0, -1)),
    "softcap": dict(softcap=3.0, causal=True),
    "alibi": dict(alibi="heads", causal=True, causal_align="bottom-right"),
    "alibi per batch": dict(alibi="batch"),
}


@pytest.mark.parametrize("nq,nk", [(1, 40), (77, 77), (200, 333), (333, 130)])
@pytest.mark.parametrize("d", [64, 96, 128, 256])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_masks_forward_and_backward(gen, needs_backward, dtype, mask, d, nq, nk):
    needs_backward(dtype, d)
    opts = dict(MASKS[mask])
    b, hq, hk = 2, 4, 2
    alibi = opts.pop("alibi", None)
    if alibi is not None:
        shape = (hq,) if alibi == "heads" else (b, hq)
        opts["alibi_slopes"] = torch.rand(shape, device="cuda", generator=gen) * 0.3
    q = rand(gen, dtype, b, hq, nq, d)
    k, v = rand(gen, dtype, b, hk, nk, d), rand(gen, dtype, b, hk, nk, d)
    check_attention(q, k, v, gen, **opts)


@pytest.mark.parametrize("nq,nk", [(77, 77), (333, 130)])
@pytest.mark.parametrize("mask", ["bottom-right causal", "window", "left only", "softcap"])
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_masks_deterministic_backward(gen, needs_backward, dtype, d, mask, nq, nk):
    """The deterministic backward (dQ from its own kernel, rows of queries; dK and dV without dQ) under the same
    masks."""
    needs_backward(dtype, d)
    q = rand(gen, dtype, 2, 4, nq, d)
    k, v = rand(gen, dtype, 2, 2, nk, d), rand(gen, dtype, 2, 2, nk, d)
    check_attention(q, k, v, gen, deterministic=True, **MASKS[mask])


@pytest.mark.parametrize("d", [32, 96, 256])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_masks_other_head_dims(gen, needs_backward, dtype, d):
    needs_backward(dtype, d)
    q, k, v = (rand(gen, dtype, 1, 2, 150, d) for _ in range(3))
    check_attention(q, k, v, gen, window=(20, 3), softcap=5.0)


@pytest.mark.parametrize("kind", ["bool", "additive", "float32"])
@pytest.mark.parametrize("shape", ["b1nk", "nk", "b11k"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_attn_mask(gen, needs_backward, dtype, kind, shape):
    needs_backward(dtype)
    b, h, nq, nk = 2, 3, 130, 150
    q, k, v = rand(gen, dtype, b, h, nq, 64), rand(gen, dtype, b, h, nk, 64), rand(gen, dtype, b, h, nk, 64)
    dims = {"b1nk": (b, 1, nq, nk), "nk": (nq, nk), "b11k": (b, 1, 1, nk)}[shape]
    keep = torch.rand(dims, device="cuda", generator=gen) > 0.3
    if kind == "bool":
        mask = keep
    else:
        bias = torch.where(keep, torch.randn(dims, device="cuda", generator=gen), -math.inf)
        mask = bias.to(dtype if kind == "additive" else torch.float32)
    check_attention(q, k, v, gen, attn_mask=mask)


def test_rows_that_see_no_key_give_zeros(gen):
    q, k, v = (rand(gen, torch.float16, 1, 2, n, 64) for n in (100, 40, 40))
    out, lse = portattn.attention(q, k, v, causal=True, causal_align="bottom-right", return_lse=True)
    assert torch.equal(out[:, :, :60], torch.zeros_like(out[:, :, :60]))
    assert bool((lse[:, :, :60] == -math.inf).all()) and bool(torch.isfinite(lse[:, :, 60:]).all())


def test_sdpa_masks_through_the_patch(gen):
    """The padding masks transformers passes (boolean and additive, [batch, 1, seq_q, seq_k]) are taken."""
    b, h, n = 2, 4, 96
    q, k, v = (rand(gen, torch.bfloat16, b, h, n, 64) for _ in range(3))
    pad = torch.arange(n, device="cuda") >= torch.tensor([0, 17], device="cuda").unsqueeze(1)  # left padding
    keep = pad[:, None, None, :] & torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
    additive = torch.zeros(keep.shape, dtype=torch.bfloat16, device="cuda").masked_fill(~keep, -1e4)
    for mask in (keep, additive):
        with portattn.patch_sdpa() as stats:
            got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert stats.portattn == 1 and stats.fallback == 0
        ref, _ = reference_masked(q, k, v, attn_mask=mask)
        assert max_rel(got, ref) <= OUT_TOL[torch.bfloat16]


def _pack(gen, dtype, lengths, heads, d):
    return rand(gen, dtype, sum(lengths), heads, d)


def _cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(causal=True, window_size=(50, 0)),
                                  dict(softcap=4.0), dict(alibi=True, causal=True)],
                         ids=["full", "causal", "window", "softcap", "alibi"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_varlen_against_each_sequence(gen, needs_backward, dtype, d, opts):
    """flash_attn_varlen_func on packed sequences equals flash-attn's semantics per sequence (bottom-right
    alignment), forward and backward."""
    needs_backward(dtype, d)
    check_varlen(gen, dtype, d, [1, 130, 77, 300], [45, 130, 200, 129], opts)


@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(causal=True, window_size=(200, 0)),
                                  dict(window_size=(100, 300))], ids=["full", "causal", "window", "two-sided"])
@pytest.mark.parametrize("d", [64, 96, 128, 256])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_varlen_long_sequences(gen, needs_backward, dtype, d, opts):
    """Packed sequences over many query and key tiles, with lengths on and off the tiles' edges and a last
    sequence that ends the tensors (on Hopper: the warp-specialized forward and, at 16-bit, the warpgroup-MMA
    backward)."""
    needs_backward(dtype, d)
    check_varlen(gen, dtype, d, [1000, 64, 2049, 129, 700], [1000, 300, 2049, 1, 1500], opts)


def check_varlen(gen, dtype, d, lens_q, lens_k, opts):
    """flash_attn_varlen_func(**opts) on random packed sequences against each sequence's float64 reference: output
    and gradients (four query heads on two key/value heads)."""
    opts = dict(opts)
    hq, hk = 4, 2
    if opts.pop("alibi", False):
        opts["alibi_slopes"] = torch.rand(len(lens_q), hq, device="cuda", generator=gen) * 0.2
    q, k, v = _pack(gen, dtype, lens_q, hq, d), _pack(gen, dtype, lens_k, hk, d), _pack(gen, dtype, lens_k, hk, d)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attn_varlen_func(*leaves, _cu(lens_q), _cu(lens_k), max(lens_q), max(lens_k), **opts)
    dout = rand(gen, dtype, *out.shape)
    got = torch.autograd.grad(out, leaves, dout)
    cq, ck = _cu(lens_q).tolist(), _cu(lens_k).tolist()
    window = opts.get("window_size", (-1, -1))
    for i in range(len(lens_q)):
        sq, sk = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        seq = [t[s].detach().double().transpose(0, 1).unsqueeze(0).requires_grad_() for t, s in ((q, sq), (k, sk),
                                                                                                 (v, sk))]
        alibi = opts.get("alibi_slopes")
        ref, _ = reference_masked(*seq, causal=opts.get("causal", False), bottom_right=True, window=window,
                                  softcap=opts.get("softcap", 0.0), alibi_slopes=None if alibi is None else alibi[i])
        ref = ref[0].transpose(0, 1)
        assert max_rel(out[sq], ref) <= OUT_TOL[dtype], ("out", i)
        refs = [r[0].transpose(0, 1) for r in torch.autograd.grad(ref, seq, dout[sq].double())]
        # one key: dq and dk are 0, only rounding is left
        assert_grads([g[s] for g, s in zip(got, (sq, sk, sk))], refs, dtype, i)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_varlen_non_finite_rows_stay_in_their_sequence(gen, needs_backward, dtype, d, causal):
    """Packed sequences whose tiles run past their end into rows holding inf and NaN (the next sequence's, and rows
    after the last sequence): the other sequences' outputs and gradients are finite and equal their references."""
    needs_backward(dtype, d)
    lens, hq, hk = [100, 200, 150], 4, 2
    total = sum(lens) + 70  # rows after the last sequence
    q, k, v = rand(gen, dtype, total, hq, d), rand(gen, dtype, total, hk, d), rand(gen, dtype, total, hk, d)
    dout = rand(gen, dtype, total, hq, d)
    cq = _cu(lens).tolist()
    poisoned = [slice(cq[1], cq[2]), slice(cq[3], total)]
    for t, value in ((q, math.inf), (k, -math.inf), (v, math.nan), (dout, math.nan)):
        for rows in poisoned:
            t[rows] = value
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attn_varlen_func(*leaves, _cu(lens), _cu(lens), max(lens), max(lens), causal=causal)
    got = torch.autograd.grad(out, leaves, dout)
    for i in (0, 2):
        rows = slice(cq[i], cq[i + 1])
        seq = [t[rows].double().transpose(0, 1).unsqueeze(0).requires_grad_() for t in (q, k, v)]
        ref, _ = reference_masked(*seq, causal=causal, bottom_right=True)
        ref = ref[0].transpose(0, 1)
        assert max_rel(out[rows], ref) <= OUT_TOL[dtype], ("out", i)
        refs = [r[0].transpose(0, 1) for r in torch.autograd.grad(ref, seq, dout[rows].double())]
        largest = max(float(r.abs().max()) for r in refs)
        for name, g, r in zip(("dq", "dk", "dv"), got, refs):
            assert bool(torch.isfinite(g[rows]).all()), (name, i)
            assert float((g[rows].double() - r).abs().max()) / largest <= GRAD_TOL[dtype], (name, i)


def test_varlen_offsets_outside_the_tensors_stay_inside(gen, needs_backward):
    """cu_seqlens are read on the GPU without a check by the host (flash-attn's contract): a sequence whose offsets
    leave the packed tensors, decrease or exceed max_seqlen is skipped by every kernel, forward and backward, with no
    access outside the tensors; the valid sequences are unaffected."""
    needs_backward(torch.float16)
    lens = [40, 70]
    q, k, v = (_pack(gen, torch.float16, lens, 2, 64) for _ in range(3))
    good = flash_attn_varlen_func(q, k, v, _cu(lens), _cu(lens), 70, 70, causal=True)
    first, second = slice(0, 40), slice(40, 110)
    for bad, longest, valid in (([0, 40, 1 << 20], 70, first), ([0, 40, 30], 70, first), ([0, 40, 111], 70, first),
                                ([-5, 40, 110], 70, second), ([0, 40, 110], 60, first)):
        cu = torch.tensor(bad, dtype=torch.int32, device="cuda")
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = flash_attn_varlen_func(*leaves, cu, cu, longest, longest, causal=True)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        assert max_rel(out[valid], good[valid]) <= OUT_TOL[torch.float16], bad


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_varlen_without_query_rows(gen, needs_backward, dtype, causal):
    """Packed sequences that have keys but no queries (max_seqlen_q = 0; q holds only rows past the sequences):
    nothing to compute forward, no kernel launched on an empty grid, and zero gradients for the keys and values of
    the sequences, which no query sees."""
    needs_backward(dtype)
    q = rand(gen, dtype, 5, 4, 64).requires_grad_()
    k, v = (rand(gen, dtype, 90, 2, 64).requires_grad_() for _ in range(2))
    empty, lens_k = _cu([0, 0]), _cu([30, 60])
    out = flash_attn_varlen_func(q, k, v, empty, lens_k, 0, 60, causal=causal)
    dout = torch.randn_like(out)
    torch.full((8 * k.numel(),), math.nan, device="cuda")  # freed at once: the gradients reuse the blocks
    dk, dv = torch.autograd.grad(out, (k, v), dout)
    torch.cuda.synchronize()
    assert out.shape == q.shape
    assert torch.equal(dk, torch.zeros_like(dk)) and torch.equal(dv, torch.zeros_like(dv))


def test_varlen_lse_and_packed_variants(gen):
    lens = [33, 200, 5]
    qkv = rand(gen, torch.float16, sum(lens), 3, 4, 64)
    cu = _cu(lens)
    a = flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=True)
    b = flash_attn_varlen_kvpacked_func(qkv[:, 0], qkv[:, 1:], cu, cu, max(lens), max(lens), causal=True)
    c = flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, max(lens), max(lens), causal=True)
    assert torch.equal(a, c) and torch.equal(b, c)
    # the LSE of packed sequences is [heads, total_q]
    _, lse = torch.ops.portattn.attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], True, 0.125, True, False, True, -1, -1, 0.0,
                                          None, None, cu, cu, max(lens), max(lens))
    assert lse.shape == (4, sum(lens))
    for i, (s, e) in enumerate(zip(cu.tolist(), cu.tolist()[1:])):
        seq = [qkv[s:e, j].double().transpose(0, 1).unsqueeze(0) for j in range(3)]
        _, ref = reference_masked(*seq, causal=True, bottom_right=True, scale=0.125)
        assert max_rel(lse[:, s:e], ref[0]) <= OUT_TOL[torch.float16]


def test_flash_attn_func_family(gen):
    b, n, h, d = 2, 150, 4, 64
    qkv = rand(gen, torch.bfloat16, b, n, 3, h, d)
    q, k, v = qkv.unbind(2)
    base = flash_attn_func(q, k, v, causal=True, window_size=(16, 0), softcap=2.0)
    assert torch.equal(base, flash_attn_qkvpacked_func(qkv, causal=True, window_size=(16, 0), softcap=2.0))
    assert torch.equal(base, flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True, window_size=(16, 0),
                                                      softcap=2.0))
    ref, _ = reference_masked(*(t.transpose(1, 2) for t in (q, k, v)), causal=True, bottom_right=True,
                              window=(16, 0), softcap=2.0)
    assert max_rel(base, ref.transpose(1, 2)) <= OUT_TOL[torch.bfloat16]


def test_flash_attn_with_kvcache_rotary(gen):
    """Rotary embedding of q and the new k at their cache positions (GPT-NeoX halves and GPT-J pairs)."""
    b, cap, hk, hq, d, new = 2, 64, 2, 4, 64, 3
    k_cache, v_cache = rand(gen, torch.float16, b, cap, hk, d), rand(gen, torch.float16, b, cap, hk, d)
    lens = torch.tensor([10, 40], dtype=torch.int32, device="cuda")
    q, k, v = rand(gen, torch.float16, b, new, hq, d), rand(gen, torch.float16, b, new, hk, d), \
        rand(gen, torch.float16, b, new, hk, d)
    angles = torch.rand(cap, d // 4, device="cuda", generator=gen) * 6
    cos, sin = angles.cos(), angles.sin()
    for interleaved in (False, True):
        kc, vc = k_cache.clone(), v_cache.clone()
        out = flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, lens, causal=True, rotary_interleaved=interleaved)
        for i in range(b):
            pos = torch.arange(lens[i], lens[i] + new, device="cuda")

            def rot(x):
                x = x.double()
                r = x[..., :d // 2]
                c, s = cos[pos].double()[:, None], sin[pos].double()[:, None]
                if interleaved:
                    a, bb = r[..., 0::2], r[..., 1::2]
                    r = torch.stack((a * c - bb * s, a * s + bb * c), -1).flatten(-2)
                else:
                    a, bb = r[..., :d // 4], r[..., d // 4:]
                    r = torch.cat((a * c - bb * s, a * s + bb * c), -1)
                return torch.cat((r, x[..., d // 2:]), -1)

            keys = torch.cat((k_cache[i, :lens[i]].double(), rot(k[i])))
            vals = torch.cat((v_cache[i, :lens[i]].double(), v[i].double()))
            assert max_rel(kc[i, lens[i]:lens[i] + new], rot(k[i])) <= 1e-3
            ref, _ = reference_masked(rot(q[i]).transpose(0, 1)[None], keys.transpose(0, 1)[None],
                                      vals.transpose(0, 1)[None], causal=True, bottom_right=True)
            assert max_rel(out[i], ref[0].transpose(0, 1)) <= OUT_TOL[torch.float16]


def test_flash_attn_with_kvcache_rotary_bad_lengths_on_the_gpu_give_nan(gen):
    """A length on the GPU that does not fit the cache gives NaN for its sequence with rotary embedding too (the
    table lookups stay inside the tables); the other sequence is right."""
    b, cap, hk, hq, d, new = 3, 64, 2, 4, 64, 2
    k_cache, v_cache = rand(gen, torch.float16, b, cap, hk, d), rand(gen, torch.float16, b, cap, hk, d)
    q, k, v = (rand(gen, torch.float16, b, new, h, d) for h in (hq, hk, hk))
    angles = torch.rand(cap, d // 4, device="cuda", generator=gen) * 6
    lens = torch.tensor([20, cap - 1, -3], dtype=torch.int32, device="cuda")
    out = flash_attn_with_kvcache(q, k_cache.clone(), v_cache.clone(), k, v, angles.cos(), angles.sin(), lens,
                                  causal=True)
    torch.cuda.synchronize()
    assert out[1:].isnan().all() and not out[0].isnan().any()
    good = flash_attn_with_kvcache(q[:1], k_cache[:1].clone(), v_cache[:1].clone(), k[:1], v[:1], angles.cos(),
                                   angles.sin(), lens[:1], causal=True)
    assert max_rel(out[:1], good) <= OUT_TOL[torch.float16]


KVCACHE_MASKS = {
    "window": dict(causal=True, window=(37, 0)),
    "window-both": dict(causal=False, window=(50, 7)),
    "softcap": dict(causal=True, softcap=3.0),
    "alibi": dict(causal=False, alibi="heads"),
    "alibi-batch-window": dict(causal=True, alibi="batch", window=(90, 0)),
}


@pytest.mark.parametrize("splits", [0, 1, 5])
@pytest.mark.parametrize("nq", [1, 5])
@pytest.mark.parametrize("layout", ["contiguous", "batch-idx", "paged"])
@pytest.mark.parametrize("mask", KVCACHE_MASKS)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_kvcache_masks(gen, dtype, mask, layout, nq, splits):
    """attention_with_kvcache with windows, softcap and ALiBi (bottom-right), left padding, cache_batch_idx and
    paged caches, per sequence against float64 over the keys each sequence holds."""
    b, cap, hk, hq, d = 3, 256, 2, 6, 64
    opts = dict(KVCACHE_MASKS[mask])
    alibi = opts.pop("alibi", None)
    if alibi is not None:
        shape = (b, hq) if alibi == "batch" else (hq,)
        opts["alibi_slopes"] = torch.rand(*shape, device="cuda", generator=gen) * 0.3
    ends, pads = [256, 70, 140], [0, 9, 100]
    cache_b = [2, 0, 1] if layout == "batch-idx" else [0, 1, 2]
    q = rand(gen, dtype, b, nq, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    args = dict(cache_seqlens=torch.tensor(ends, dtype=torch.int32, device="cuda"),
                cache_leftpad=torch.tensor(pads, dtype=torch.int32, device="cuda"), num_splits=splits)
    kc, vc = k_cache, v_cache
    if layout == "batch-idx":
        args["cache_batch_idx"] = torch.tensor(cache_b, dtype=torch.int32, device="cuda")
    elif layout == "paged":
        order = torch.randperm(b * cap // 32, device="cuda", generator=gen)
        args["block_table"] = order.view(b, cap // 32).to(torch.int32)
        kc, vc = (torch.empty_like(t).view(-1, 32, hk, d) for t in (k_cache, v_cache))
        kc[order], vc[order] = k_cache.view(-1, 32, hk, d), v_cache.view(-1, 32, hk, d)
    out, lse = portattn.attention_with_kvcache(q, kc, vc, return_lse=True, **opts, **args)
    for i in range(b):
        keys = (t[cache_b[i], pads[i]:ends[i]].transpose(0, 1)[None] for t in (k_cache, v_cache))
        slopes = opts.get("alibi_slopes")
        ref, ref_lse = reference_masked(q[i].transpose(0, 1)[None], *keys, causal=opts["causal"], bottom_right=True,
                                        window=opts.get("window", (-1, -1)), softcap=opts.get("softcap", 0.0),
                                        alibi_slopes=None if slopes is None else slopes[i] if slopes.dim() == 2
                                        else slopes)
        assert max_rel(out[i], ref[0].transpose(0, 1)) <= OUT_TOL[dtype], i
        assert max_rel(lse[i], ref_lse[0]) <= OUT_TOL[dtype], i


def test_kvcache_rows_without_keys_and_appends_with_leftpad(gen):
    """Query positions before a sequence's first key (fewer keys than positions, after left padding) give zeros and
    LSE -inf; new keys land after cache_seqlens (left padding does not move them) and are attended to."""
    b, cap, hk, hq, d, nq, new = 2, 64, 2, 2, 64, 4, 2
    k_cache, v_cache = rand(gen, torch.float16, b, cap, hk, d), rand(gen, torch.float16, b, cap, hk, d)
    q, k, v = rand(gen, torch.float16, b, nq, hq, d), rand(gen, torch.float16, b, new, hk, d), \
        rand(gen, torch.float16, b, new, hk, d)
    ends, pads = [20, 33], [20, 3]
    kc, vc = k_cache.clone(), v_cache.clone()
    torch.full_like(q, math.nan)  # freed at once: the output reuses the block, rows left unwritten stay NaN
    out, lse = portattn.attention_with_kvcache(
        q, kc, vc, k=k, v=v, cache_seqlens=torch.tensor(ends, dtype=torch.int32, device="cuda"),
        cache_leftpad=torch.tensor(pads, dtype=torch.int32, device="cuda"), window=(1, 0), return_lse=True)
    assert not bool(torch.isfinite(lse[0, :, :2]).any()) and not bool(out[0, :2].any())
    for i in range(b):
        e, p = ends[i], pads[i]
        assert torch.equal(kc[i, e:e + new], k[i]) and torch.equal(vc[i, e:e + new], v[i])
        keys = (t[i, p:e + new].transpose(0, 1)[None] for t in (kc, vc))
        ref, ref_lse = reference_masked(q[i].transpose(0, 1)[None], *keys, causal=True, bottom_right=True,
                                        window=(1, 0))
        assert max_rel(out[i], ref[0].transpose(0, 1)) <= OUT_TOL[torch.float16]
        assert max_rel(lse[i], ref_lse[0]) <= OUT_TOL[torch.float16]


# Randomized checks: each run draws its own calls from the test's seed (printed on failure; the draws and the inputs
# follow from it, and PORTATTN_TEST_SEED replays it), with lengths on and around the tiles' edges, grouped heads,
# every head dim and dtype the target has kernels for, strided layouts and every mask and option, and compares them
# with float64. PORTATTN_FUZZ_CALLS sets the number of calls per test (half as many packed batches).
FUZZ_CALLS = int(os.environ.get("PORTATTN_FUZZ_CALLS", "24"))
EDGES = (1, 2, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 79, 80, 81, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383,
         384, 385, 511, 512, 513)


def draws(gen):
    """The draws of a randomized test: from the seed of its inputs' generator, so that the seed replays both."""
    return random.Random(gen.initial_seed())


def brief(options):
    """Options for a failure message, tensors by their shapes."""
    return {key: tuple(o.shape) if isinstance(o, torch.Tensor) else o for key, o in options.items()}


def draw_length(rng, most=1100):
    return rng.choice(EDGES) if rng.random() < 0.6 else rng.randint(1, most)


def draw_dtype_and_dim(rng, target):
    dtype, d = rng.choice(list(DTYPES.values())), rng.choice(HEAD_DIMS)
    return (dtype, d) if backward.has_kernel(target, dtype, d) else draw_dtype_and_dim(rng, target)


def draw_heads(rng, most):
    """(heads_q, heads_kv): 1-3 key/value heads in groups of 1-8 query heads, at most ``most`` query heads."""
    hk = rng.randint(1, min(3, most))
    return hk * rng.choice([g for g in (1, 2, 3, 4, 8) if hk * g <= most]), hk


def strided(rng, gen, dtype, b, h, n, d):
    """A [b, h, n, d] tensor in one of the layouts callers pass: contiguous, a [b, n, h, d] tensor's transpose,
    rows padded past the head dim (16-byte aligned), or a slice whose rows are not 16-byte aligned (copied)."""
    layout = rng.choice(("bhsd", "bshd", "padded", "unaligned"))
    if layout == "bshd":
        return rand(gen, dtype, b, n, h, d).transpose(1, 2)
    if layout == "padded":
        return rand(gen, dtype, b, h, n, d + 16)[..., :d]
    if layout == "unaligned":
        return rand(gen, dtype, b, h, n, d + 1)[..., 1:]
    return rand(gen, dtype, b, h, n, d)


def draw_masks(rng, gen, b, hq, nq, nk):
    """Keyword arguments of portattn.attention: a mask and score modifiers, or none."""
    kind = rng.choice(("none", "causal", "bottom-right", "window", "softcap", "alibi", "bool", "additive"))
    opts = {"causal": rng.random() < 0.5} if kind in ("window", "softcap", "alibi") else {}
    if kind == "causal":
        opts["causal"] = True
    if kind == "bottom-right" or kind in ("window", "alibi") and rng.random() < 0.5:
        opts.update(causal=opts.get("causal", True), causal_align="bottom-right")
    if kind == "window":
        opts["window"] = (rng.choice((-1, 0, rng.randint(1, nk))),
                          0 if opts["causal"] else rng.choice((-1, 0, rng.randint(1, nk))))
    if kind == "softcap":
        opts["softcap"] = rng.uniform(0.5, 30.0)
    if kind == "alibi":
        shape = (hq,) if rng.random() < 0.5 else (b, hq)
        opts["alibi_slopes"] = torch.rand(shape, device="cuda", generator=gen) * 0.3
    if kind in ("bool", "additive"):
        dims = rng.choice(((b, 1, nq, nk), (nq, nk), (b, hq, nq, nk), (b, 1, 1, nk)))
        keep = torch.rand(dims, device="cuda", generator=gen) > rng.uniform(0.0, 0.9)
        opts["attn_mask"] = keep if kind == "bool" else torch.where(
            keep, torch.randn(dims, device="cuda", generator=gen), -math.inf)
    return opts


def test_fuzz_attention(gen, on_target):
    """portattn.attention on random calls, forward (output and LSE) and backward (dq, dk, dv)."""
    rng = draws(gen)
    for call in range(FUZZ_CALLS):
        dtype, d = draw_dtype_and_dim(rng, on_target)
        b = rng.randint(1, 3)
        nq, nk = draw_length(rng), draw_length(rng)
        hq, hk = draw_heads(rng, max(1, min(16, 3_000_000 // (b * nq * nk))))
        q = strided(rng, gen, dtype, b, hq, nq, d)
        k, v = strided(rng, gen, dtype, b, hk, nk, d), strided(rng, gen, dtype, b, hk, nk, d)
        opts = draw_masks(rng, gen, b, hq, nq, nk)
        if "attn_mask" in opts and opts["attn_mask"].dtype != torch.bool:
            opts["attn_mask"] = opts["attn_mask"].to(rng.choice((dtype, torch.float32)))
        if rng.random() < 0.3:
            opts["scale"] = rng.choice((0.0, -0.2, rng.uniform(0.01, 0.5)))
        if rng.random() < 0.2:
            opts["deterministic"] = True
        what = dict(call=call, dtype=dtype, d=d, b=b, hq=hq, hk=hk, nq=nq, nk=nk,
                    strides=(q.stride(), k.stride(), v.stride()),
                    opts=brief(opts))
        try:
            check_attention(q, k, v, gen, **opts)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from e


def test_fuzz_varlen(gen, on_target):
    """flash_attn_varlen_func on random packed batches, empty sequences included."""
    rng = draws(gen)
    for call in range(FUZZ_CALLS // 2):
        dtype, d = draw_dtype_and_dim(rng, on_target)
        n = rng.randint(1, 5)
        lens_q = [0 if rng.random() < 0.1 else draw_length(rng, 700) for _ in range(n)]
        lens_k = [0 if rng.random() < 0.1 else draw_length(rng, 700) for _ in range(n)]
        lens_q[0], lens_k[0] = max(lens_q[0], 1), max(lens_k[0], 1)  # at least one row and one key
        opts = rng.choice((dict(), dict(causal=True), dict(causal=True, window_size=(rng.randint(0, 300), 0)),
                           dict(window_size=(rng.randint(0, 300), rng.randint(0, 300))),
                           dict(softcap=rng.uniform(1.0, 20.0), causal=rng.random() < 0.5),
                           dict(alibi=True, causal=rng.random() < 0.5)))
        if rng.random() < 0.2:
            opts["deterministic"] = True
        try:
            check_varlen(gen, dtype, d, lens_q, lens_k, opts)
        except AssertionError as e:
            raise AssertionError(f"call {call}: {dtype}, d={d}, lens_q={lens_q}, lens_k={lens_k}, {opts}: {e}") from e


def test_fuzz_kvcache(gen, on_target):
    """attention_with_kvcache on random caches: per-sequence lengths, appended keys, contiguous or paged (page sizes
    multiples of 16, scattered tables), grouped heads, query lengths 1-16, masks and split counts."""
    rng = draws(gen)
    for call in range(FUZZ_CALLS):
        dtype, d = rng.choice(list(DTYPES.values())), rng.choice(HEAD_DIMS)
        b, nq = rng.randint(1, 4), rng.choice((1, 1, 2, 4, rng.randint(1, 16)))
        hq, hk = draw_heads(rng, 16)
        new = rng.choice((0, nq))
        page = rng.choice((None, 16, 32, 48, 64, 256))
        cap = rng.choice((64, 256, 1024, 4096))
        cap = cap if page is None else -(-cap // page) * page
        ends = [rng.randint(0, cap - new) for _ in range(b)]
        opts = rng.choice((dict(causal=True), dict(causal=False), dict(causal=True, window=(rng.randint(0, 300), 0)),
                           dict(causal=rng.random() < 0.5, softcap=rng.uniform(1.0, 20.0))))
        splits = rng.choice((0, 0, 1, rng.randint(2, 64)))
        k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
        q = rand(gen, dtype, b, nq, hq, d)
        k, v = (rand(gen, dtype, b, new, hk, d) for _ in range(2)) if new else (None, None)
        what = dict(call=call, dtype=dtype, d=d, b=b, nq=nq, hq=hq, hk=hk, new=new, page=page, cap=cap, ends=ends,
                    opts=opts, splits=splits)
        kc, vc, table = k_cache.clone(), v_cache.clone(), None
        if page is not None:
            per_seq = cap // page
            order = torch.randperm(b * per_seq + 2, device="cuda", generator=gen)
            kc, vc = (torch.full((b * per_seq + 2, page, hk, d), math.nan, device="cuda", dtype=dtype)
                      for _ in range(2))
            table = order[:b * per_seq].view(b, per_seq).to(torch.int32)
            for pool, cache in ((kc, k_cache), (vc, v_cache)):
                pool[table.flatten().long()] = cache.view(b * per_seq, page, hk, d)
        out, lse = portattn.attention_with_kvcache(
            q, kc, vc, k=k, v=v, cache_seqlens=torch.tensor(ends, dtype=torch.int32, device="cuda"),
            block_table=table, num_splits=splits, return_lse=True, **opts)
        if page is not None:  # the caches as sequences again
            kc, vc = (pool[table.flatten().long()].view(b, cap, hk, d) for pool in (kc, vc))
        for i in range(b):
            e = ends[i] + new
            if new:
                assert torch.equal(kc[i, ends[i]:e], k[i]) and torch.equal(vc[i, ends[i]:e], v[i]), what
            keys = (t[i, :e].transpose(0, 1)[None] for t in (kc, vc))
            ref, ref_lse = reference_masked(q[i].transpose(0, 1)[None], *keys, bottom_right=True, **opts)
            assert max_rel(out[i], ref[0].transpose(0, 1)) <= OUT_TOL[dtype], (what, i)
            assert max_rel(lse[i], ref_lse[0]) <= OUT_TOL[dtype], (what, i)


def test_fuzz_sdpa_patch(gen, on_target):
    """F.scaled_dot_product_attention on random calls under patch_sdpa (causal, boolean and additive masks of every
    broadcast shape, grouped heads, scales, strided layouts): the patch takes every call, and its output and
    gradients equal PyTorch's own SDPA on the same call in float64."""
    rng = draws(gen)
    for call in range(FUZZ_CALLS):
        dtype, d = draw_dtype_and_dim(rng, on_target)
        b = rng.randint(1, 3)
        nq, nk = draw_length(rng, 600), draw_length(rng, 600)
        hq, hk = draw_heads(rng, 16)
        q = strided(rng, gen, dtype, b, hq, nq, d)
        k, v = strided(rng, gen, dtype, b, hk, nk, d), strided(rng, gen, dtype, b, hk, nk, d)
        kwargs = {"enable_gqa": True} if hq != hk else {}
        kind = rng.choice(("none", "causal", "bool", "additive"))
        if kind == "causal":
            kwargs["is_causal"] = True
        if kind in ("bool", "additive"):
            dims = rng.choice(((nq, nk), (b, 1, nq, nk), (b, hq, nq, nk), (1, 1, 1, nk), (1, nk)))
            keep = torch.rand(dims, device="cuda", generator=gen) > rng.uniform(0.0, 0.9)
            keep[..., rng.randrange(nk)] = True  # every row keeps a key: SDPA's backends differ on rows that see none
            kwargs["attn_mask"] = keep if kind == "bool" else torch.where(
                keep, torch.randn(dims, device="cuda", generator=gen), -math.inf).to(dtype)
        if rng.random() < 0.3:
            kwargs["scale"] = rng.uniform(0.01, 0.5)
        what = dict(call=call, dtype=dtype, d=d, b=b, hq=hq, hk=hk, nq=nq, nk=nk,
                    kwargs=brief(kwargs))
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with portattn.patch_sdpa() as stats:
            out = F.scaled_dot_product_attention(*leaves, **kwargs)
        assert stats.portattn == 1 and stats.fallback == 0, (what, stats)
        leaves64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
        ref_kwargs = dict(kwargs)
        if kind == "additive":
            ref_kwargs["attn_mask"] = kwargs["attn_mask"].double()
        ref = F.scaled_dot_product_attention(*leaves64, **ref_kwargs)
        assert max_rel(out, ref) <= OUT_TOL[dtype], (what, max_rel(out, ref))
        dout = rand(gen, dtype, *out.shape)
        assert_grads(torch.autograd.grad(out, leaves, dout), torch.autograd.grad(ref, leaves64, dout.double()),
                     dtype, what)
