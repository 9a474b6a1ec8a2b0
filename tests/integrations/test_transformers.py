"""``attn_implementation="portattn"`` in Hugging Face transformers.

Three tiny random-weight models with fixed weights: Llama with grouped-query attention, Mistral with a sliding
window shorter than the sequences, and Gemma 2 (attention logit softcapping, sliding and global layers alternating).
The reference is ``attn_implementation="sdpa"``, and ``"eager"`` for Gemma 2: transformers' SDPA function drops the
``softcap`` argument (``test_cpu_softcap_falls_back_to_eager`` shows that it changes the logits where the installed
transformers still builds Gemma 2 on SDPA; newer ones refuse to).

Without a GPU: registration, the fallbacks (to SDPA, to the eager computation for softcap, once-per-reason
warnings), the fallback rule on fake GPU tensors, and the whole mapping (masks, alignment, windows, softcap, GQA) with
portattn.attention replaced by portattn's float64 reference taking the same arguments. On the GPU (every target,
the wave64 emulation included) the same checks run on portattn's kernels: greedy generation from left-padded prompts,
a bfloat16 forward, and a training step on a right-padded batch, each counting the calls portattn took so that a
fallback fails the test.

Tolerances (errors as in tests/ops/test_masks.py: largest error over the largest reference value): float32 results
may be further from the float64 reference than the reference's own float32 run by the float32 bound of portattn's
attention kernels in tests/ops/test_masks.py (outputs 2e-5, gradients 5e-5; an attention output off by that fraction
moves the logits of these normalized two-layer models by about as much); bfloat16 logits may be at most twice as far
from float32 as the reference's bfloat16 run (that error is mostly the rounding of weights and activations, which
both runs share).
"""
import pytest

transformers = pytest.importorskip("transformers")

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from transformers import AttentionInterface  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: E402

import portattn.integrations.transformers as pt  # noqa: E402
import portattn.runtime.target as targets  # noqa: E402
from portattn.runtime.target import Target  # noqa: E402
from portattn.tools.reference import reference_masked  # noqa: E402

SEED, VOCAB, HEAD_DIM, LAYERS, WINDOW, NEW = 7, 128, 64, 2, 8, 10
PROMPT_LENGTHS, TRAIN_LENGTHS = (16, 11, 5), (24, 17, 9)
F32_OUT, F32_GRAD = 2e-5, 5e-5  # portattn's float32 kernel bounds (tests/ops/test_masks.py OUT_TOL, GRAD_TOL)
COMMON = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
              head_dim=HEAD_DIM, num_hidden_layers=LAYERS, vocab_size=VOCAB, initializer_range=0.1, pad_token_id=0)
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "mistral": lambda: transformers.MistralConfig(sliding_window=WINDOW, **COMMON),
    "gemma2": lambda: transformers.Gemma2Config(sliding_window=WINDOW, attn_logit_softcapping=2.0,
                                                query_pre_attn_scalar=HEAD_DIM, **COMMON),
}
REFERENCE = {"llama": "sdpa", "mistral": "sdpa", "gemma2": "eager"}
WINDOWS = {"llama": {None}, "mistral": {(WINDOW - 1, 0)}, "gemma2": {None, (WINDOW - 1, 0)}}  # per layer kind
KINDS = list(CONFIGS)
EXACT = "float64-reference"  # registered below: the error scale of float32 and bfloat16 runs


def exact_attention(module, query, key, value, attention_mask, scaling=None, softcap=None, **kwargs):
    """portattn's float64 reference on SDPA's masks, with softcap as eager applies it. (transformers' eager Gemma 2
    in float64 gives NaN with padding: its float64 mask minimum overflows its float32 softmax.)"""
    causal = attention_mask is None and query.shape[2] > 1 and getattr(module, "is_causal", True)
    out, _ = reference_masked(query, key, value, causal=causal, softcap=softcap or 0.0, attn_mask=attention_mask,
                              scale=scaling)
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


AttentionInterface.register(EXACT, exact_attention)
AttentionMaskInterface.register(EXACT, sdpa_mask)


def build(kind: str, impl: str, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[kind](), attn_implementation=impl)
    return model.to(device=device, dtype=dtype).eval()


def padded(lengths: tuple, left: bool, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids (pads 0) and the attention mask of sequences of ``lengths``, padded left or right."""
    n = max(lengths)
    ids = torch.randint(1, VOCAB, (len(lengths), n), generator=torch.Generator().manual_seed(SEED))
    positions, lengths = torch.arange(n), torch.tensor(lengths).unsqueeze(1)
    mask = (positions >= n - lengths) if left else (positions < lengths)
    return (ids * mask).to(device), mask.long().to(device)


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def max_rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


@pytest.fixture
def calls(monkeypatch):
    """The keyword arguments of each portattn.attention call the integration makes."""
    seen, inner = [], pt.attention

    def counting(q, k, v, **kwargs):
        seen.append(dict(kwargs, queries=q.shape[2], keys=k.shape[2]))
        return inner(q, k, v, **kwargs)

    monkeypatch.setattr(pt, "attention", counting)
    return seen


@pytest.fixture
def reference_attention(monkeypatch):
    """The integration takes CPU calls too and runs them on portattn's float64 reference, with the arguments it
    would pass to portattn.attention."""
    def attention(q, k, v, *, causal=False, scale=None, causal_align="top-left", window=None, softcap=0.0,
                  attn_mask=None):
        out, _ = reference_masked(q, k, v, causal=causal, bottom_right=causal_align == "bottom-right",
                                  window=window or (-1, -1), softcap=softcap, attn_mask=attn_mask, scale=scale)
        return out.to(q.dtype)

    monkeypatch.setattr(pt, "attention", attention)
    monkeypatch.setattr(pt, "_unsupported", lambda *args: None)


@pytest.fixture
def reference_calls(reference_attention, calls):
    return calls


def check_generate(kind: str, device: str, calls: list, **generate_kwargs) -> None:
    """float32 greedy generation from left-padded prompts: the reference's tokens and float32-close logits."""
    ids, mask = padded(PROMPT_LENGTHS, left=True, device=device)

    def generate(impl: str, dtype: torch.dtype = torch.float32):
        with torch.no_grad():
            out = build(kind, impl, dtype, device).generate(
                ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                return_dict_in_generate=True, output_logits=True, **generate_kwargs)
        return out.sequences, torch.stack(out.logits).double()

    ref_tokens, ref = generate(REFERENCE[kind])
    exact_tokens, exact = generate(EXACT, torch.float64)
    tokens, ours = generate("portattn")
    assert len(calls) == NEW * LAYERS, "every attention call must run on portattn"
    tol = (max_rel(ref, exact) + F32_OUT) * exact.abs().max().item()
    top2 = exact.topk(2, dim=-1).values
    assert (top2[..., 0] - top2[..., 1]).min().item() > 2 * tol, "a near tie: greedy tokens may differ legitimately"
    assert torch.equal(exact_tokens, ref_tokens)
    assert torch.equal(tokens, ref_tokens)
    assert (ours - exact).abs().max().item() <= tol


def check_bf16_forward(kind: str, device: str, calls: list) -> None:
    """bfloat16 logits (left padding, the positions that are not padding) within twice the reference's own bfloat16
    error against float32."""
    ids, mask = padded(PROMPT_LENGTHS, left=True, device=device)

    def logits(impl: str, dtype: torch.dtype) -> torch.Tensor:
        with torch.no_grad():
            return build(kind, impl, dtype, device)(input_ids=ids, attention_mask=mask).logits[mask.bool()]

    exact, ref = logits(REFERENCE[kind], torch.float32), logits(REFERENCE[kind], torch.bfloat16)
    ours = logits("portattn", torch.bfloat16)
    assert len(calls) == LAYERS
    assert rel(ours, exact) <= 2 * rel(ref, exact), (rel(ours, exact), rel(ref, exact))


def check_training(kind: str, device: str, calls: list) -> None:
    """Forward and backward of the LM loss on a right-padded batch (labels -100 on pads) in float32: logits, loss
    and parameter gradients float32-close to the reference."""
    ids, mask = padded(TRAIN_LENGTHS, left=False, device=device)
    labels = ids.masked_fill(mask == 0, -100)

    def step(impl: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        model = build(kind, impl, dtype, device).train()
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
        return out.loss.detach().double(), out.logits.detach()[mask.bool()].double(), grads

    ref_loss, ref_logits, ref_grads = step(REFERENCE[kind], torch.float32)
    exact_loss, exact_logits, exact_grads = step(EXACT, torch.float64)
    loss, logits, grads = step("portattn", torch.float32)
    assert len(calls) == LAYERS
    tol = (max_rel(ref_logits, exact_logits) + F32_OUT) * exact_logits.abs().max().item()
    assert (logits - exact_logits).abs().max().item() <= tol
    # The loss reads only the logits of positions that are not padding: it moves by at most twice their largest change.
    assert abs(loss - exact_loss).item() <= 2 * tol
    assert max_rel(grads, exact_grads) <= max_rel(ref_grads, exact_grads) + F32_GRAD, (
        max_rel(grads, exact_grads), max_rel(ref_grads, exact_grads))


# Without a GPU.


def test_registered_name_is_accepted(tmp_path):
    assert AttentionInterface._global_mapping[pt.NAME] is pt.portattn_attention_forward
    assert AttentionMaskInterface._global_mapping[pt.NAME] is pt.portattn_mask
    model = build("llama", "portattn")
    assert model.config._attn_implementation == "portattn"
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="portattn")
    assert loaded.config._attn_implementation == "portattn"


def test_register_is_idempotent():
    before = (dict(AttentionInterface._global_mapping), dict(AttentionMaskInterface._global_mapping))
    pt.register()
    pt.register()
    assert (dict(AttentionInterface._global_mapping), dict(AttentionMaskInterface._global_mapping)) == before


def test_cpu_falls_back_to_sdpa_with_one_warning(monkeypatch):
    monkeypatch.setattr(pt, "_warned", set())
    ids, mask = padded(PROMPT_LENGTHS, left=True, device="cpu")
    model, ref = build("llama", "portattn"), build("llama", "sdpa")
    with torch.no_grad():
        with pytest.warns(UserWarning, match=r"\(device: .*sdpa_attention_forward") as record:
            got = model(input_ids=ids, attention_mask=mask).logits
            model(input_ids=ids, attention_mask=mask)
        expected = ref(input_ids=ids, attention_mask=mask).logits
    assert sum("portattn cannot take" in str(w.message) for w in record) == 1
    assert torch.equal(got, expected)


def test_cpu_softcap_falls_back_to_eager(monkeypatch):
    monkeypatch.setattr(pt, "_warned", set())
    ids, mask = padded(PROMPT_LENGTHS, left=True, device="cpu")
    keep = mask.bool()
    with torch.no_grad():
        with pytest.warns(UserWarning, match="eager computation"):
            got = build("gemma2", "portattn")(input_ids=ids, attention_mask=mask).logits[keep]
        eager = build("gemma2", "eager")(input_ids=ids, attention_mask=mask).logits[keep]
        # Newer transformers refuse to build Gemma 2 on SDPA; the versions that build it drop the softcap there.
        sdpa = (build("gemma2", "sdpa")(input_ids=ids, attention_mask=mask).logits[keep]
                if transformers.Gemma2ForCausalLM._supports_sdpa else None)
    torch.testing.assert_close(got, eager)
    if sdpa is not None:
        assert (sdpa - eager).abs().max() > 0.1, "SDPA drops softcap: its logits differ from eager's"


@pytest.fixture
def fake_sm90(monkeypatch):
    monkeypatch.setattr(targets, "target_for", lambda device: Target.for_arch("sm_90"))


def test_fallback_rule(fake_sm90):
    def qkv(dtype=torch.float32, head_dim=64):
        return (torch.empty(2, 8, 5, head_dim, dtype=dtype, device="cuda"),
                *(torch.empty(2, 2, 9, head_dim, dtype=dtype, device="cuda") for _ in range(2)))

    with FakeTensorMode():
        mask = torch.ones(2, 1, 5, 9, dtype=torch.bool, device="cuda")
        cases = {
            None: (*qkv(), mask, 0.0, 0.125, None),
            "dropout": (*qkv(), mask, 0.1, 0.125, None),
            "dtype": (*qkv(torch.float64), None, 0.0, None, None),
            "head_dim": (*qkv(head_dim=48), None, 0.0, None, None),
            "attn_mask": (*qkv(torch.bfloat16), torch.zeros(2, 1, 5, 9, device="cuda"), 0.0, None, None),
            "position_bias": (*qkv(), None, 0.0, None, torch.zeros(1, 8, 5, 9, device="cuda")),
        }
        for reason, args in cases.items():
            problem = pt._unsupported(*args)
            assert (problem and problem.reason) == reason
    cpu = torch.zeros(1, 2, 3, 64)
    assert pt._unsupported(cpu, cpu, cpu, None, 0.0, None, None).reason == "device"


def test_unmasked_calls_are_causal_as_in_sdpa(monkeypatch):
    """Without a mask the call is causal (top-left, as SDPA's is_causal) for more than one query, following
    ``is_causal`` or else ``module.is_causal``; scaling and softcap are passed on."""
    calls = []
    monkeypatch.setattr(pt, "attention", lambda q, k, v, **kwargs: calls.append(kwargs) or torch.zeros_like(q))
    monkeypatch.setattr(pt, "_unsupported", lambda *args: None)
    module = torch.nn.Module()
    kv = torch.zeros(2, 2, 9, 64)
    for q_len, is_causal, module_causal in ((9, None, True), (1, None, True), (9, False, True), (9, None, False)):
        module.is_causal = module_causal
        q = torch.zeros(2, 8, q_len, 64)
        out, weights = pt.portattn_attention_forward(module, q, kv, kv, None, scaling=0.3, softcap=None,
                                                     is_causal=is_causal, sliding_window=4)
        assert out.shape == (2, q_len, 8, 64) and out.is_contiguous() and weights is None
    assert [c["causal"] for c in calls] == [True, False, False, False]
    assert all(c["scale"] == 0.3 and c["softcap"] == 0.0 and c["attn_mask"] is None for c in calls)


def test_mask_structure():
    """A mask is split into bottom-right causal, window and key padding only when it is exactly their intersection."""
    rows, cols = torch.arange(4).unsqueeze(1) + 2, torch.arange(6)  # 4 queries, the last of 6 keys
    keys = torch.tensor([[False, True, True, True, True, True], [True] * 6]).view(2, 1, 1, 6)
    causal, window = cols <= rows, cols > rows - 3
    padding, none = pt._structure(keys & causal, None)
    assert torch.equal(padding, keys) and none is None
    padding, pair = pt._structure(keys & causal & window, 3)
    assert torch.equal(padding, keys) and pair == (2, 0)
    assert pt._structure(causal & window, 3) == (None, (2, 0))
    assert pt._structure(keys & causal & window, None) is None
    assert pt._structure(keys & causal, 3) is None
    top_left = torch.arange(4).unsqueeze(1) >= cols  # queries at the first positions (a static cache's layout)
    assert pt._structure(keys & top_left, None) is None


def test_mask_changed_in_place_is_passed_whole(monkeypatch):
    calls = []
    monkeypatch.setattr(pt, "attention", lambda q, k, v, **kwargs: calls.append(kwargs) or torch.zeros_like(q))
    monkeypatch.setattr(pt, "_unsupported", lambda *args: None)
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()
    pt._structured[mask] = (mask._version, *pt._structure(mask, None))
    q = torch.zeros(1, 2, 4, 64)
    pt.portattn_attention_forward(torch.nn.Module(), q, q, q, mask)
    mask[..., 0] = False
    pt.portattn_attention_forward(torch.nn.Module(), q, q, q, mask)
    assert calls[0]["causal"] and calls[0]["attn_mask"] is None
    assert not calls[1]["causal"] and calls[1]["attn_mask"] is mask


@pytest.mark.parametrize("kind", KINDS)
def test_mapping_generate(kind, reference_calls):
    """The masks transformers builds reach portattn as bottom-right causal, the model's window and a key padding
    mask, and give the reference's tokens."""
    check_generate(kind, "cpu", reference_calls)
    assert all(c["causal"] and c["causal_align"] == "bottom-right" for c in reference_calls)
    assert {c["window"] for c in reference_calls} == WINDOWS[kind]
    assert any(c["attn_mask"] is not None and c["attn_mask"].shape[-2] == 1 for c in reference_calls)


def test_mapping_static_cache(reference_calls):
    """A static cache's keys run past the queries: its prefill masks are passed as they are (a single query's mask
    is its key padding, under a bottom-right causal mask that hides nothing)."""
    check_generate("llama", "cpu", reference_calls, cache_implementation="static")
    prefill = [c for c in reference_calls if c["queries"] > 1]
    assert prefill and all(not c["causal"] and c["attn_mask"].shape[-2] == c["queries"] for c in prefill)


@pytest.mark.parametrize("kind", KINDS)
def test_mapping_bf16_forward(kind, reference_calls):
    check_bf16_forward(kind, "cpu", reference_calls)


@pytest.mark.parametrize("kind", KINDS)
def test_mapping_training(kind, reference_calls):
    check_training(kind, "cpu", reference_calls)


def test_window_matters():
    """Mistral's window changes these logits (so the window tests above can fail)."""
    ids, mask = padded(PROMPT_LENGTHS, left=True, device="cpu")
    windowed = build("mistral", "sdpa")
    torch.manual_seed(SEED)
    config = CONFIGS["mistral"]()
    config.sliding_window = None
    full = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    with torch.no_grad():
        a = windowed(input_ids=ids, attention_mask=mask).logits[mask.bool()]
        b = full(input_ids=ids, attention_mask=mask).logits[mask.bool()]
    assert (a - b).abs().max() > 0.1


# On the GPU, on portattn's kernels.


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_generate(kind, on_target, calls):
    check_generate(kind, "cuda", calls)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_bf16_forward(kind, on_target, calls):
    check_bf16_forward(kind, "cuda", calls)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_training(kind, on_target, calls):
    check_training(kind, "cuda", calls)


def test_attention_sinks_are_refused():
    """transformers' SDPA function drops ``s_aux`` (attention sinks): portattn refuses it rather than ignore it."""
    q = torch.randn(1, 2, 3, 64)
    with pytest.raises(NotImplementedError, match="s_aux"):
        pt.portattn_attention_forward(torch.nn.Module(), q, q, q, None, s_aux=torch.zeros(2))


def test_unmasked_call_of_a_known_signature_skips_the_checks(monkeypatch):
    """An unmasked call whose signature portattn.attention ran before goes straight to it (which replays its
    launches): no fallback, no checks; any other call is checked (on the CPU: it falls back)."""
    from portattn.ops import eager

    monkeypatch.setattr(eager, "_replays", {})
    monkeypatch.setattr(pt, "_warned", set())
    module = torch.nn.Module()
    module.is_causal = True
    q, k = torch.randn(2, 4, 5, 64), torch.randn(2, 4, 5, 64)
    eager.remember(eager.signature(q, k, k, True, 0.125, True), lambda q, k, v, out: q + 1)  # out=None: new tensor
    out, weights = pt.portattn_attention_forward(module, q, k, k, None, scaling=0.125)
    assert torch.equal(out, (q + 1).transpose(1, 2)) and weights is None
    with pytest.warns(UserWarning, match="portattn cannot take an attention call"):
        pt.portattn_attention_forward(module, q, k, k, None, scaling=0.25)
