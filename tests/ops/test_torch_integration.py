"""portattn inside PyTorch on the GPU: the operators (forward and backward), torch.compile, CUDA graphs (inference and
a training step), the SDPA patch and a Hugging Face transformers model, each checked against the float64
reference."""
import copy

import pytest
import torch
import torch.nn.functional as F

import portattn
from portattn.ops.attention import NO_MASKS
from portattn.tools.reference import reference_attention, reference_gradients, relative_error
from portattn.tools.testing import capture_graph

pytestmark = pytest.mark.gpu
TOL = 1e-5
NAN = float("nan")


def rand(gen, *shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen)


def test_opcheck(gen):
    q, k, v = rand(gen, 2, 4, 65, 64), rand(gen, 2, 2, 65, 64), rand(gen, 2, 2, 65, 64)
    for return_lse in (False, True):
        for results in (
            torch.library.opcheck(torch.ops.portattn.attention.default,
                                  (q, k, v, True, 0.125, return_lse, False, *NO_MASKS)),
            torch.library.opcheck(torch.ops.portattn.attention_out.default,
                                  (q, k, v, torch.empty_like(q), True, 0.125, return_lse, *NO_MASKS)),
        ):
            assert all(r == "SUCCESS" for r in results.values()), results


def test_opcheck_with_autograd(gen):
    """The forward operator with inputs that require grad (autograd registration, AOT dispatch with its backward),
    and the backward operator itself."""
    q, k, v = (t.requires_grad_() for t in (rand(gen, 2, 4, 65, 64), rand(gen, 2, 2, 65, 64), rand(gen, 2, 2, 65, 64)))
    slopes = torch.rand(4, device="cuda", generator=gen)
    cu = torch.tensor([0, 20, 65], dtype=torch.int32, device="cuda")
    packed = (q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1))
    for args, masks in (((q, k, v), NO_MASKS),
                        ((q, k, v), (True, 7, 2, 3.0, slopes, None, None, None, 0, 0)),
                        (packed, (True, -1, -1, 0.0, None, None, cu, cu, 45, 45))):
        results = torch.library.opcheck(torch.ops.portattn.attention.default, (*args, True, 0.125, True, True, *masks))
        assert all(r == "SUCCESS" for r in results.values()), results
        with torch.no_grad():
            out, lse = torch.ops.portattn.attention(*args, True, 0.125, True, True, *masks)
        detached = tuple(t.detach() for t in args)
        bwd_args = (torch.randn_like(out), *detached, out, lse, None, True, 0.125, True, *masks)
        results = torch.library.opcheck(torch.ops.portattn.attention_backward.default, bwd_args)
        assert all(r == "SUCCESS" for r in results.values()), results


class Block(torch.nn.Module):
    """Exact elementwise ops around attention on [batch, seq, heads, head_dim] inputs, for inductor to fuse."""

    def forward(self, q, k, v):
        q, k, v = (t.transpose(1, 2) * 2.0 for t in (q, k, v))
        out, lse = portattn.attention(q, k, v, causal=True, return_lse=True)
        return out.transpose(1, 2) * 2.0, lse * 2.0


@pytest.mark.parametrize("hq, hk, n, d", [(8, 8, 257, 64), (8, 2, 300, 128)])
def test_compile_fullgraph_matches_eager_and_reference(gen, hq, hk, n, d):
    torch._dynamo.reset()
    block = Block()
    compiled = torch.compile(block, fullgraph=True)
    for _ in range(2):  # fresh values each time: nothing may be baked into the compiled graph
        q, k, v = rand(gen, 2, n, hq, d), rand(gen, 2, n, hk, d), rand(gen, 2, n, hk, d)
        out, lse = compiled(q, k, v)
        eager_out, eager_lse = block(q, k, v)
        ref, ref_lse = reference_attention(*(t.transpose(1, 2) * 2.0 for t in (q, k, v)), causal=True)
        assert relative_error(out, ref.transpose(1, 2) * 2.0) <= TOL
        assert relative_error(lse, ref_lse * 2.0) <= TOL
        assert relative_error(out, eager_out.double()) <= 1e-6
        assert relative_error(lse, eager_lse.double()) <= 1e-6


def test_compile_fullgraph_with_out_argument(gen):
    torch._dynamo.reset()

    def write_into(q, k, v, out):
        portattn.attention(q, k, v, out=out, scale=0.2)
        return out * 2.0

    compiled = torch.compile(write_into, fullgraph=True)
    for _ in range(2):
        q, k, v = rand(gen, 2, 4, 129, 64), rand(gen, 2, 4, 200, 64), rand(gen, 2, 4, 200, 64)
        out = torch.full_like(q, NAN)
        res = compiled(q, k, v, out)
        ref, _ = reference_attention(q, k, v, scale=0.2)
        assert relative_error(out, ref) <= TOL, "the compiled call must write into out"
        assert relative_error(res, ref * 2.0) <= TOL


@pytest.mark.parametrize("layout", ["contiguous", "bshd_view", "copied"])
@pytest.mark.parametrize("use_out", [False, True])
def test_cuda_graph_capture_and_replay(gen, layout, use_out):
    b, hq, hk, n, d = 2, 8, 2, 300, 64

    def make(h):
        if layout == "bshd_view":
            return rand(gen, b, n, h, d).transpose(1, 2)
        if layout == "copied":  # rows not 16-byte aligned: the call copies them, inside the graph
            return rand(gen, b, h, n, d + 1)[..., :d]
        return rand(gen, b, h, n, d)

    q, k, v = make(hq), make(hk), make(hk)
    buf = torch.empty(b, hq, n, d, device="cuda") if use_out else None

    def step():
        return portattn.attention(q, k, v, causal=True, return_lse=True, out=buf)

    graph, (static_out, static_lse) = capture_graph(step)
    assert not use_out or static_out is buf
    for _ in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, device="cuda", generator=gen))
        static_out.fill_(NAN)
        static_lse.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        ref, ref_lse = reference_attention(q, k, v, causal=True)
        assert relative_error(static_out, ref) <= TOL
        assert relative_error(static_lse, ref_lse) <= TOL


def test_patch_sdpa_routes_on_gpu(gen):
    q, k, v = rand(gen, 2, 8, 200, 64), rand(gen, 2, 2, 200, 64), rand(gen, 2, 2, 200, 64)
    mask = torch.rand(200, 200, device="cuda", generator=gen) > 0.2
    mask.fill_diagonal_(True)
    masked_expected = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    original = F.scaled_dot_product_attention
    with portattn.patch_sdpa() as stats:
        gqa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        scaled = F.scaled_dot_product_attention(q, q, q, scale=0.3)
        masked = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        F.scaled_dot_product_attention(q.double(), q.double(), q.double())
        F.scaled_dot_product_attention(q[..., :48], q[..., :48], q[..., :48])
        with torch.enable_grad():
            F.scaled_dot_product_attention(q.clone().requires_grad_(), q, q)
    assert F.scaled_dot_product_attention is original
    assert stats.portattn == 4
    assert dict(stats.fallback_reasons) == {"dtype": 1, "head_dim": 1}
    assert relative_error(masked, masked_expected.double()) <= TOL
    assert torch.equal(gqa, portattn.attention(q, k, v, causal=True)), "routed to portattn"
    ref, _ = reference_attention(q, k, v, causal=True)
    assert relative_error(gqa, ref) <= TOL
    ref, _ = reference_attention(q, q, q, scale=0.3)
    assert relative_error(scaled, ref) <= TOL


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sdpa_under_autocast_computes_in_the_autocast_dtype(gen, dtype):
    """Under torch.autocast, float32 inputs reach portattn as autocast hands them to SDPA: the patched call (taken by
    portattn) and portattn.scaled_dot_product_attention return SDPA's dtype, and their output and the float32
    gradients of the inputs are within twice SDPA's error of float64 on the cast inputs (relative to the largest
    gradient, plus the rounding of the exact result to the dtype)."""
    q, k, v = rand(gen, 2, 8, 200, 64), rand(gen, 2, 2, 200, 64), rand(gen, 2, 2, 200, 64)
    dout = rand(gen, 2, 8, 200, 64).to(dtype)
    calls = {"sdpa": F.scaled_dot_product_attention, "patched": None,
             "portattn": portattn.scaled_dot_product_attention}
    results = {}
    for name, fn in calls.items():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with torch.autocast("cuda", dtype=dtype), portattn.patch_sdpa() as stats:
            out = (fn or F.scaled_dot_product_attention)(*leaves, is_causal=True, enable_gqa=True)
        results[name] = (out, torch.autograd.grad(out, leaves, dout))
        assert out.dtype == dtype and stats.portattn == (name == "patched"), name
        assert all(g.dtype == torch.float32 for g in results[name][1]), name
    cast = [t.to(dtype) for t in (q, k, v)]
    ref, _ = reference_attention(*cast, causal=True)
    refs = reference_gradients(*cast, dout, causal=True)
    largest = max(float(r.abs().max()) for r in refs)

    def grad_error(g, r):
        return float((g.double() - r).abs().max()) / largest
    for name in ("patched", "portattn"):
        out, grads = results[name]
        assert relative_error(out, ref) <= 2 * relative_error(results["sdpa"][0], ref) + 1e-3, name
        for g, s, r in zip(grads, results["sdpa"][1], refs):
            rounding = grad_error(r.to(dtype), r)
            assert grad_error(g, r) <= 2 * grad_error(s, r) + rounding + 1e-6, name


def _grads(fn, q, k, v, dout):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    return torch.autograd.grad(fn(*leaves), leaves, dout)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compile_fullgraph_training_step(gen, dtype):
    """torch.compile(fullgraph=True) of a function with attention, differentiated: AOTAutograd traces the forward and
    the backward operator; gradients match eager and float64."""
    torch._dynamo.reset()

    def f(q, k, v):
        return portattn.attention(q * 2.0, k, v, causal=True) * 3.0

    compiled = torch.compile(f, fullgraph=True)
    for _ in range(2):
        q, k, v = (rand(gen, 2, h, 190, 64).to(dtype) for h in (8, 2, 2))
        dout = rand(gen, 2, 8, 190, 64).to(dtype)
        got, eager = _grads(compiled, q, k, v, dout), _grads(f, q, k, v, dout)
        refs = reference_gradients(q * 2.0, k, v, dout * 3.0, causal=True)
        refs = (refs[0] * 2.0, refs[1], refs[2])
        for g, e, r in zip(got, eager, refs):
            assert relative_error(g, e.double()) <= (1e-6 if dtype == torch.float32 else 1e-2)
            assert relative_error(g, r) <= (1e-5 if dtype == torch.float32 else 2e-2)


def test_cuda_graph_training_step(gen):
    """A forward and backward captured in one CUDA graph and replayed on new inputs."""
    q, k, v = (rand(gen, 2, h, 300, 64) for h in (8, 2, 2))
    dout = rand(gen, 2, 8, 300, 64)
    for t in (q, k, v):
        t.requires_grad_()

    def step():
        out = portattn.attention(q, k, v, causal=True)
        return torch.autograd.grad(out, (q, k, v), dout)

    graph, static_grads = capture_graph(step)
    for _ in range(3):
        with torch.no_grad():
            for t in (q, k, v, dout):
                t.copy_(torch.randn(t.shape, device="cuda", generator=gen))
        for g in static_grads:
            g.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        for g, r in zip(static_grads, reference_gradients(q, k, v, dout, causal=True)):
            assert relative_error(g, r) <= TOL


def test_transformers_llama_gqa_runs_on_portattn(gen):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(gen.initial_seed())
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=64, num_hidden_layers=2, vocab_size=1000,
                                      attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).to("cuda").eval()
    ids = torch.randint(0, config.vocab_size, (2, 100), device="cuda", generator=gen)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with portattn.patch_sdpa() as stats:
            got = model(input_ids=ids).logits
            assert (stats.portattn, stats.fallback) == (config.num_hidden_layers, 0), stats
            again = model(input_ids=ids).logits
        assert (stats.portattn, stats.fallback) == (2 * config.num_hidden_layers, 0), stats
        ref = copy.deepcopy(model).double()(input_ids=ids).logits  # float64: SDPA's math path
    assert torch.equal(got, again)
    assert relative_error(got, ref) <= TOL
    assert relative_error(got, expected.double()) <= TOL
