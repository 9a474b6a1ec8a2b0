"""portattn.patch_sdpa without a GPU: installing and restoring the router, fallback reasons and counts, the
routing decision on fake GPU tensors, and a Hugging Face transformers model whose calls all fall back."""
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import portattn
import portattn.integrations.sdpa
import portattn.runtime.target as targets
from portattn.runtime.target import Target


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def test_enable_disable_restore_the_original_object():
    original = F.scaled_dot_product_attention
    first = portattn.enable_sdpa_patch()
    try:
        patched = F.scaled_dot_product_attention
        assert patched is not original
        second = portattn.enable_sdpa_patch()
        assert F.scaled_dot_product_attention is patched, "a nested enable keeps the one router"
        portattn.disable_sdpa_patch(first)  # out of order: the other activation keeps the patch
        assert F.scaled_dot_product_attention is patched
        with pytest.raises(RuntimeError, match="not an active"):
            portattn.disable_sdpa_patch(first)
        portattn.disable_sdpa_patch(second)
    finally:
        if F.scaled_dot_product_attention is not original:
            portattn.disable_sdpa_patch()
    assert F.scaled_dot_product_attention is original
    with pytest.raises(RuntimeError, match="not enabled"):
        portattn.disable_sdpa_patch()


def test_context_manager_restores_on_error_and_counts_per_activation():
    original = F.scaled_dot_product_attention
    q = rand(1, 2, 5, 64)
    with pytest.raises(KeyError):
        with portattn.patch_sdpa() as outer:
            F.scaled_dot_product_attention(q, q, q)
            with portattn.patch_sdpa() as inner:
                F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(5, 5))
            F.scaled_dot_product_attention(q, q, q)
            raise KeyError("boom")
    assert F.scaled_dot_product_attention is original
    assert (outer.portattn, outer.fallback, dict(outer.fallback_reasons)) == (0, 3, {"device": 3})
    assert (inner.portattn, inner.fallback, dict(inner.fallback_reasons)) == (0, 1, {"device": 1})


Q, KV = rand(2, 4, 9, 64), rand(2, 2, 9, 64)

FALLBACKS = [
    ("attn_mask", (Q, Q, Q), {"attn_mask": torch.zeros(9, 9, dtype=torch.int32)}),
    ("attn_mask", (Q, Q, Q, rand(3, 9)), {}),
    ("attn_mask", (Q, Q, Q, rand(9, 9)), {"is_causal": True}),
    ("attn_mask", (Q, Q, Q, rand(9, 9).requires_grad_()), {}),
    ("dropout", (Q, Q, Q), {"dropout_p": 0.3}),
    ("ndim", (Q[0], Q[0], Q[0]), {"is_causal": True}),
    ("dtype", (Q.double(), Q.double(), Q.double()), {}),
    ("head_dim", (rand(2, 4, 9, 48),) * 3, {}),
    ("head_dim", (Q, Q, rand(2, 4, 9, 128)), {}),
    ("gqa", (Q, KV, KV), {"enable_gqa": False}),
    ("shape", (Q, rand(1, 4, 9, 64), rand(1, 4, 9, 64)), {}),
    ("empty", (rand(2, 4, 0, 64), Q, Q), {}),
    ("device", (Q, KV, KV), {"is_causal": True, "enable_gqa": True, "scale": 0.3}),
    ("arguments", (Q, Q, Q, None, 0.0, False, 0.3), {}),  # scale is keyword-only in torch
]


@pytest.mark.parametrize("reason, args, kwargs", FALLBACKS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(FALLBACKS)])
def test_fallbacks_pass_the_call_through_unchanged(monkeypatch, reason, args, kwargs):
    seen = []

    def original(*a, **kw):
        seen.append((a, kw))
        return "original result"

    monkeypatch.setattr(F, "scaled_dot_product_attention", original)
    with portattn.patch_sdpa() as stats:
        assert F.scaled_dot_product_attention(*args, **kwargs) == "original result"
    assert F.scaled_dot_product_attention is original
    assert len(seen) == 1
    a, kw = seen[0]
    assert len(a) == len(args) and all(x is y for x, y in zip(a, args)) and kw == kwargs
    assert (stats.portattn, stats.fallback, dict(stats.fallback_reasons)) == (0, 1, {reason: 1})


def test_autocast_casts_the_inputs_as_sdpa_receives_them():
    """Under torch.autocast (here on the CPU) the inputs are those SDPA computes on: floating tensors other than
    float64 in the autocast dtype, a boolean mask as it is; outside it the same objects. A call the router does not
    take still reaches the original function with the arguments as they were given."""
    from portattn.ops.attention import sdpa_autocast

    q, mask, additive = rand(2, 4, 9, 64), torch.rand(9, 9) > 0.3, rand(9, 9)
    double = q.double()
    assert all(a is b for a, b in zip(sdpa_autocast(q, q, double, mask), (q, q, double, mask)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cq, ck, cv, cm = sdpa_autocast(q, q, double, additive)
        assert (cq.dtype, ck.dtype, cv.dtype, cm.dtype) == (torch.bfloat16, torch.bfloat16, torch.float64,
                                                            torch.bfloat16)
        assert torch.equal(cq, q.to(torch.bfloat16)) and sdpa_autocast(q, q, q, mask)[3] is mask
        assert sdpa_autocast(None, q, q, None)[1] is q  # not a tensor query: nothing to decide on
    seen = []
    original = F.scaled_dot_product_attention
    try:
        F.scaled_dot_product_attention = lambda *a, **kw: seen.append(a) or "original result"
        with torch.autocast("cpu", dtype=torch.bfloat16), portattn.patch_sdpa() as stats:
            assert F.scaled_dot_product_attention(q, q, q, is_causal=True) == "original result"
    finally:
        F.scaled_dot_product_attention = original
    assert all(a is b for a, b in zip(seen[0], (q, q, q))) and dict(stats.fallback_reasons) == {"device": 1}


def test_fallback_results_equal_the_original():
    q, k, v = rand(2, 4, 33, 64), rand(2, 2, 33, 64), rand(2, 2, 33, 64)
    mask = torch.rand(33, 33) > 0.3
    mask.fill_diagonal_(True)
    expected = [F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                F.scaled_dot_product_attention(q, q, q, attn_mask=mask)]
    with portattn.patch_sdpa() as stats:
        got = [F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
               F.scaled_dot_product_attention(q, q, q, attn_mask=mask)]
    assert all(torch.equal(g, e) for g, e in zip(got, expected))
    assert stats.fallback == 2 and stats.portattn == 0


@pytest.fixture
def fake_sm90(monkeypatch):
    """portattn sees an sm_90 GPU behind every CUDA device (the routing decision, without a GPU)."""
    monkeypatch.setattr(targets, "target_for", lambda device: Target.for_arch("sm_90"))


def test_supported_calls_route_to_portattn(fake_sm90):
    with FakeTensorMode():
        q = torch.empty(2, 8, 100, 64, device="cuda")
        kv = torch.empty(2, 2, 120, 64, device="cuda")
        with portattn.patch_sdpa() as stats:
            out = F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
            F.scaled_dot_product_attention(q, q, q, scale=0.5)
            F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(100, 100, device="cuda"))
            with pytest.raises(RuntimeError):  # torch's own error: GQA needs enable_gqa=True
                F.scaled_dot_product_attention(q, kv, kv)
            F.scaled_dot_product_attention(q.to(torch.float64), q.to(torch.float64), q.to(torch.float64))
        assert out.shape == (2, 8, 100, 64) and out.dtype == torch.float32
    assert stats.portattn == 3
    assert dict(stats.fallback_reasons) == {"gqa": 1, "dtype": 1}


def test_calls_that_require_grad_are_taken_unless_no_backward_kernel(fake_sm90, monkeypatch):
    """The routing decision for inputs that require grad (on fake CUDA tensors: a CPU-only torch cannot build their
    autograd graph; the routed training calls themselves run in the GPU tests)."""
    import portattn.kernels.backward as backward
    from portattn.integrations.sdpa import _fallback_reason, _sdpa_args

    with FakeTensorMode():
        q = torch.empty(2, 8, 100, 64, device="cuda", requires_grad=True)
        kv = torch.empty(2, 2, 120, 64, device="cuda", requires_grad=True)
        assert _fallback_reason(_sdpa_args(q, kv, kv, is_causal=True, enable_gqa=True)) is None
        monkeypatch.setattr(backward, "has_kernel", lambda target, dtype, head_dim=64: False)
        monkeypatch.setattr(portattn.integrations.sdpa, "_target_ok", {})
        assert _fallback_reason(_sdpa_args(q, kv, kv, enable_gqa=True)) == "backward"
        with torch.no_grad():
            assert _fallback_reason(_sdpa_args(q, kv, kv, enable_gqa=True)) is None


def test_unknown_gpu_falls_back(monkeypatch):
    monkeypatch.setattr(targets, "target_for",
                        lambda device: Target("cuda", "sm_75", 32, 40, 65536, 65536))
    with FakeTensorMode():
        q = torch.empty(1, 2, 10, 64, device="cuda")
        with portattn.patch_sdpa() as stats:
            F.scaled_dot_product_attention(q, q, q)
    assert dict(stats.fallback_reasons) == {"target": 1}


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=64, num_hidden_layers=2, vocab_size=1000,
                                      attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(config).eval(), config


def test_transformers_llama_calls_sdpa_causal_without_mask(monkeypatch):
    """What the GPU test relies on: with input_ids only, each layer calls SDPA with is_causal=True, no mask,
    enable_gqa=True and 4-D [batch, heads, seq, head_dim] tensors."""
    model, config = _tiny_llama()
    calls = []
    original = F.scaled_dot_product_attention

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", record)
    with torch.no_grad():
        model(input_ids=torch.randint(0, config.vocab_size, (2, 100)))
    assert len(calls) == config.num_hidden_layers
    for args, kwargs in calls:
        q, k, v = args[:3]
        assert q.shape == (2, 4, 100, 64) and k.shape == v.shape == (2, 2, 100, 64)
        assert kwargs.get("attn_mask") is None and kwargs.get("dropout_p", 0.0) == 0.0
        assert kwargs.get("is_causal") is True and kwargs.get("enable_gqa") is True


def test_transformers_llama_on_cpu_falls_back_unchanged():
    model, config = _tiny_llama()
    ids = torch.randint(0, config.vocab_size, (2, 100))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with portattn.patch_sdpa() as stats:
            got = model(input_ids=ids).logits
    assert torch.equal(got, expected)
    assert stats.portattn == 0 and dict(stats.fallback_reasons) == {"device": config.num_hidden_layers}
