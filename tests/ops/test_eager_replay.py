"""Repeated eager calls replay the launches of an earlier call of their signature (ops/eager.py): each replayed
call computes on its own inputs (against float64), into ``out`` when given, the patch counts replayed calls, a
call that differs in anything the checks or the kernel choice read (gradients, alignment, options, dtype, shape,
the layout of ``out``) does not replay, and training calls replay their forward and backward launches."""
import pytest
import torch
import torch.nn.functional as F

import portattn
from portattn.ops import eager
from portattn.tools.reference import reference_attention, reference_gradients, relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target")]
TOL = {torch.float16: 3e-3, torch.float32: 1e-5}


def rand(gen, dtype, *shape):
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("nq,causal", [(1, False), (5, False), (300, False), (300, True)])
def test_replayed_calls_compute_on_their_own_inputs(gen, dtype, nq, causal):
    """Decode-shaped (one and five query rows) and forward calls, each repeated with fresh inputs: the second and
    later calls replay, and every result matches float64 on its own inputs."""
    for call in range(3):
        q, k, v = rand(gen, dtype, 2, 8, nq, 64), rand(gen, dtype, 2, 2, 300, 64), rand(gen, dtype, 2, 2, 300, 64)
        key = eager.signature(q, k, v, causal, None, True)
        if call == 0:
            eager._replays.pop(key, None)  # an earlier test may have made this call
        assert key is not None and (key in eager._replays) == (call > 0)
        torch.full_like(q, float("nan"))  # freed at once: the output reuses the block
        out = portattn.attention(q, k, v, causal=causal)
        assert relative_error(out, reference_attention(q, k, v, causal)[0]) <= TOL[dtype], call


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_calls_with_out_replay_into_it(gen, layout):
    """Calls with ``out=`` (contiguous, or a [batch, seq, heads, dim] tensor seen as [batch, heads, seq, dim]): the
    second and later calls replay; each writes its own result into its poisoned ``out`` and counts the write."""
    shape = (2, 4, 200, 64)
    for call in range(3):
        q, k, v = (rand(gen, torch.float16, *shape) for _ in range(3))
        out = torch.empty(shape if layout == "bhsd" else (2, 200, 4, 64), dtype=q.dtype, device="cuda")
        out = (out if layout == "bhsd" else out.transpose(1, 2)).fill_(float("nan"))
        key = eager.signature(q, k, v, True, None, True, out)
        if call == 0:
            eager._replays.pop(key, None)
        assert key is not None and key != eager.signature(q, k, v, True, None, True)
        assert (key in eager._replays) == (call > 0)
        version = out._version
        assert portattn.attention(q, k, v, causal=True, out=out) is out
        assert out._version > version
        assert relative_error(out, reference_attention(q, k, v, True)[0]) <= TOL[torch.float16], call
    # An output at an unaligned address: written through a temporary, never replayed.
    base = torch.empty(2 * 4 * 200 * 64 + 1, dtype=torch.float16, device="cuda")
    shifted = base[1:].view(shape).fill_(float("nan"))
    assert eager.signature(q, k, v, True, None, True, shifted) is None
    portattn.attention(q, k, v, causal=True, out=shifted)
    assert relative_error(shifted, reference_attention(q, k, v, True)[0]) <= TOL[torch.float16]


def test_patched_sdpa_replays_and_counts(gen):
    q, k, v = (rand(gen, torch.float16, 1, 4, 1, 128) for _ in range(3))
    k, v = rand(gen, torch.float16, 1, 4, 700, 128), rand(gen, torch.float16, 1, 4, 700, 128)
    with portattn.patch_sdpa() as stats:
        for _ in range(3):
            q = rand(gen, torch.float16, 1, 4, 1, 128)
            out = F.scaled_dot_product_attention(q, k, v)
            assert relative_error(out, reference_attention(q, k, v, False)[0]) <= TOL[torch.float16]
    assert stats.portattn == 3 and stats.fallback == 0
    assert eager.signature(q, k, v, False, None, False) in eager._replays


@pytest.mark.parametrize("nq", [1, 3])
def test_a_growing_cache_replays_across_key_lengths(gen, monkeypatch, nq):
    """Decode calls over a cache that grows (a new key length each call, as when generating with a cache that is
    concatenated every token), through the SDPA patch, the cache contiguous or seen through a [batch, seq, heads, dim]
    view (also at a length seen before): after the first call none takes the checked path, calls share their decode
    launches where the split count is the same, and each result matches float64 on its own inputs (lengths crossing
    split counts, one a whole key tile and one not)."""
    from portattn.kernels import decode
    from portattn.ops import attention as ops

    checked = []
    real = ops.call_sdpa
    monkeypatch.setattr(ops, "call_sdpa", lambda *args: checked.append(args[1].shape[2]) or real(*args))
    monkeypatch.setattr(eager, "_replays", {})
    monkeypatch.setattr(eager, "_any_length", {})
    monkeypatch.setattr(decode, "_calls", {})
    monkeypatch.setattr(decode, "_shapes", {})
    lengths = (300, 301, 301, 302, 1000, 4096, 4097, 20000, 300)
    with portattn.patch_sdpa() as stats:
        for i, keys in enumerate(lengths):
            q = rand(gen, torch.float16, 2, 8, nq, 128)
            k, v = rand(gen, torch.float16, 2, 2, keys, 128), rand(gen, torch.float16, 2, 2, keys, 128)
            if i % 2:  # [batch, seq, heads, dim] tensors
                k, v = k.transpose(1, 2).contiguous().transpose(1, 2), v.transpose(1, 2).contiguous().transpose(1, 2)
            torch.full_like(q, float("nan"))  # freed at once: the output reuses the block
            out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            assert relative_error(out, reference_attention(q, k, v, False)[0]) <= TOL[torch.float16], keys
    assert checked == [300] and stats.portattn == len(lengths)
    (shape,) = decode._shapes.values()
    assert len({id(c.launches) for c in decode._calls.values()}) == len(shape.launches) < len(set(lengths))


def test_a_key_length_first_seen_in_a_graph_capture(gen):
    """A decode-shaped call whose key length is first seen while a CUDA graph is captured (replaying the launches of
    another length): eager calls of that length made before the graph is replayed, and after, match float64, and so
    does the graph's output (the captured call's lengths tensor is the graph's own, filled when it replays)."""
    q = rand(gen, torch.float16, 2, 8, 1, 128)
    k, v = rand(gen, torch.float16, 2, 2, 777, 128), rand(gen, torch.float16, 2, 2, 777, 128)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        portattn.attention(q, k[:, :, :501], v[:, :, :501])  # the kernels, loaded; launches for any key length kept
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = portattn.attention(q, k, v)
    ref = reference_attention(q, k, v, False)[0]
    for _ in range(2):
        torch.full_like(q, float("nan"))
        assert relative_error(portattn.attention(q, k, v), ref) <= TOL[torch.float16]
    static.fill_(float("nan"))
    graph.replay()
    assert relative_error(static, ref) <= TOL[torch.float16]
    assert relative_error(portattn.attention(q, k, v), ref) <= TOL[torch.float16]


def test_calls_that_differ_do_not_replay(gen):
    q, k, v = (rand(gen, torch.float16, 1, 2, 64, 64) for _ in range(3))
    portattn.attention(q, k, v, causal=True)
    assert eager.signature(q, k, v, True, None, True) in eager._replays
    assert eager.signature(q, k, v, False, None, True) != eager.signature(q, k, v, True, None, True)
    assert eager.signature(q, k, v, True, 0.5, True) != eager.signature(q, k, v, True, None, True)
    assert eager.signature(q, k, v, 1, None, True) is None  # not a bool: the checks raise
    assert eager.signature(q, k, v, True, 1, True) is None  # an int scale takes the checked path
    leaf = q.clone().requires_grad_()
    assert eager.signature(leaf, k, v, True, None, True) not in (None, eager.signature(q, k, v, True, None, True))
    with torch.no_grad():
        assert eager.signature(leaf, k, v, True, None, True) == eager.signature(q, k, v, True, None, True)
    # An unaligned view of the same shape and strides: not replayed (the first call read in place), still right.
    base = rand(gen, torch.float16, 1 * 2 * 64 * 64 + 1)
    shifted = base[1:].view(1, 2, 64, 64)
    assert eager.signature(shifted, k, v, True, None, True) is None
    out = portattn.attention(shifted, k, v, causal=True)
    assert relative_error(out, reference_attention(shifted, k, v, True)[0]) <= TOL[torch.float16]
    with pytest.raises(TypeError, match="causal must be a bool"):
        portattn.attention(q, k, v, causal=1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("nq,causal,heads_kv", [(3, False, 2), (200, True, 2), (200, False, 8)])
def test_training_calls_replay_forward_and_backward(gen, dtype, nq, causal, heads_kv):
    """Training calls repeated with fresh inputs: the second and later calls replay the forward's launches, the
    backward replays those of the first backward with the same layout of the output's gradient (contiguous, then a
    [batch, seq, heads, dim] tensor seen as [batch, heads, seq, dim]), and every output and gradient matches float64
    on its own inputs. The outputs and gradients are poisoned memory's next tenants."""
    tol = {torch.bfloat16: (3e-2, 5e-2), torch.float32: (1e-5, 3e-5)}[dtype]
    for call in range(4):
        q = rand(gen, dtype, 2, 8, nq, 64).requires_grad_()
        k, v = (rand(gen, dtype, 2, heads_kv, 200, 64).requires_grad_() for _ in range(2))
        key = eager.signature(q, k, v, causal, None, True)
        if call == 0:
            eager._replays.pop(key, None)
        assert key is not None and (key in eager._replays) == (call > 0)
        torch.full((4 * q.numel(),), float("nan"), device="cuda")  # freed at once: the outputs reuse the blocks
        out = portattn.attention(q, k, v, causal=causal)
        assert relative_error(out, reference_attention(q, k, v, causal)[0]) <= tol[0], call
        dout = rand(gen, dtype, *q.shape)
        if call >= 2:
            dout = dout.transpose(1, 2).contiguous().transpose(1, 2)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        refs = reference_gradients(q, k, v, dout, causal)
        largest = max(float(r.abs().max()) for r in refs)
        for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
            assert g.shape == r.shape and g.dtype == dtype
            err = float((g.double() - r).abs().max()) / largest
            assert err <= tol[1], (call, name, err)


def test_training_replay_is_deterministic_and_retains(gen):
    """A deterministic training call's replayed backward gives the same bits as the first, also when the graph is
    kept and the backward runs twice; gradients flow to the inputs that need them only."""
    q, k, v = (rand(gen, torch.float16, 1, 4, 130, 64) for _ in range(3))
    dout = rand(gen, torch.float16, 1, 4, 130, 64)
    runs = []
    for call in range(3):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = portattn.attention(*leaves, causal=True, deterministic=True)
        runs.append(torch.autograd.grad(out, leaves, dout, retain_graph=True))
        runs.append(torch.autograd.grad(out, leaves, dout))
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run))
    for call in range(2):
        leaf = q.clone().requires_grad_()
        out = portattn.attention(leaf, k, v, causal=True)
        out.backward(dout)
        assert float((leaf.grad - runs[0][0]).abs().max()) <= 1e-2 * float(runs[0][0].abs().max())
        assert k.grad is None


def test_flash_attn_func_training_calls_replay(gen):
    """flash_attn_func on [batch, seq, heads, dim] tensors (portattn reads their [batch, heads, seq, dim] views in
    place), causal with as many queries as keys, repeated with fresh inputs: the second and later calls replay the
    forward and the backward, and every output and gradient matches float64 on its own inputs."""
    from portattn.flash_attn import flash_attn_func

    for call in range(3):
        q = rand(gen, torch.bfloat16, 2, 150, 8, 64).requires_grad_()
        k, v = (rand(gen, torch.bfloat16, 2, 150, 2, 64).requires_grad_() for _ in range(2))
        q4, k4, v4 = (t.transpose(1, 2) for t in (q, k, v))
        key = eager.signature(q4, k4, v4, True, None, True, deterministic=False)
        if call == 0:
            eager._replays.pop(key, None)
        assert key is not None and (key in eager._replays) == (call > 0)
        out = flash_attn_func(q, k, v, causal=True)
        assert relative_error(out.transpose(1, 2), reference_attention(q4, k4, v4, True)[0]) <= 3e-2, call
        dout = rand(gen, torch.bfloat16, *out.shape)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        refs = reference_gradients(q4, k4, v4, dout.transpose(1, 2), True)
        largest = max(float(r.abs().max()) for r in refs)
        for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
            err = float((g.transpose(1, 2).double() - r).abs().max()) / largest
            assert err <= 5e-2, (call, name, err)


@pytest.mark.parametrize("opts", [dict(causal=True, window=(40, 0)), dict(window=(30, 20)), dict(softcap=3.0),
                                  dict(causal=True, causal_align="bottom-right")],
                         ids=["causal window", "window", "softcap", "bottom-right"])
def test_calls_with_mask_options_replay(gen, opts):
    """Calls with a window, softcap or a bottom-right diagonal (150 queries over 200 keys), repeated with fresh inputs:
    the second and later training calls replay forward and backward (their options are part of the signature), the
    inference calls too, and every output and gradient matches float64 on its own inputs."""
    from portattn.ops import attention as attention_ops
    from portattn.tools.reference import reference_masked

    causal = opts.get("causal", False)
    options = attention_ops._replay_options(opts.get("causal_align", "top-left"), opts.get("window"),
                                            opts.get("softcap", 0.0))
    ref_opts = dict(causal=causal, softcap=opts.get("softcap", 0.0), window=opts.get("window", (-1, -1)),
                    bottom_right=opts.get("causal_align") == "bottom-right")
    for call in range(3):
        q = rand(gen, torch.bfloat16, 2, 4, 150, 64).requires_grad_()
        k, v = (rand(gen, torch.bfloat16, 2, 2, 200, 64).requires_grad_() for _ in range(2))
        key = eager.signature(q, k, v, causal, None, True, options=options)
        if call == 0:
            eager._replays.pop(key, None)
        assert options and key is not None and (key in eager._replays) == (call > 0)
        leaves64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
        ref, _ = reference_masked(*leaves64, **ref_opts)
        out = portattn.attention(q, k, v, **opts)
        with torch.no_grad():
            inference = portattn.attention(q, k, v, **opts)
        for result in (out, inference):
            assert float((result.double() - ref).abs().max() / ref.abs().max()) <= 3e-2, call
        dout = rand(gen, torch.bfloat16, *q.shape)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        refs = torch.autograd.grad(ref, leaves64, dout.double())
        largest = max(float(r.abs().max()) for r in refs)
        for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
            assert float((g.double() - r).abs().max()) / largest <= 5e-2, (call, name)
