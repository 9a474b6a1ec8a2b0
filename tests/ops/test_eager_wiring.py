"""The replay of repeated eager calls (ops/eager.py) as each entry point uses it, without a GPU: a launch remembered
under a call's signature (here a stand-in that writes a known result) serves ``portattn.attention``,
``portattn.scaled_dot_product_attention`` and the SDPA patch, counted by the patch, and calls with ``out=``; a call
of another signature, or one that needs a gradient, does not use it. The kernels' own replays run in
tests/ops/test_eager_replay.py (GPU)."""
import pytest
import torch
import torch.nn.functional as F

import portattn
from portattn.ops import eager


@pytest.fixture
def remembered(monkeypatch):
    """Signatures remembered with a stand-in launch that writes q + 1 into the output."""
    monkeypatch.setattr(eager, "_replays", {})

    def remember(q, k, v, causal, scale, gqa):
        eager.remember(eager.signature(q, k, v, causal, scale, gqa), stand_in)
    return remember


def stand_in(q, k, v, out):
    """A replay's contract: the result into ``out`` when given, else a new tensor; here q + 1."""
    return q + 1 if out is None else out.copy_(q + 1)


def test_entry_points_replay_a_remembered_call(remembered):
    q, k, v = torch.randn(1, 4, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64)
    remembered(q, k, v, True, None, True)
    assert torch.equal(portattn.attention(q, k, v, causal=True), q + 1)
    remembered(q, k, v, True, 0.5, True)
    assert torch.equal(portattn.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5, enable_gqa=True),
                       q + 1)
    with portattn.patch_sdpa() as stats:
        assert torch.equal(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5, enable_gqa=True), q + 1)
    assert (stats.portattn, stats.fallback) == (1, 0)


def test_bottom_right_calls_replay_where_the_diagonals_agree(remembered):
    """With as many queries as keys (or no causal mask, window or ALiBi) flash-attn's bottom-right diagonal is the
    top-left one: flash_attn_func ([batch, seq, heads, dim] views of the remembered tensors) and
    attention(causal_align="bottom-right") replay the top-left call. With fewer queries, a causal bottom-right call
    has a signature of its own (not remembered here: the checked path, which raises for CPU tensors)."""
    from portattn.flash_attn import flash_attn_func

    def bshd(t):
        return t.transpose(1, 2)
    q, k, v = torch.randn(1, 4, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64)
    short = q[:, :, :4]
    for causal in (False, True):
        remembered(q, k, v, causal, None, True)
        remembered(short, k, v, causal, None, True)
        assert torch.equal(flash_attn_func(bshd(q), bshd(k), bshd(v), causal=causal), bshd(q + 1))
    assert torch.equal(portattn.attention(q, k, v, causal=True, causal_align="bottom-right"), q + 1)
    assert torch.equal(flash_attn_func(bshd(short), bshd(k), bshd(v)), bshd(short + 1))  # no diagonal
    for call in (lambda: flash_attn_func(bshd(short), bshd(k), bshd(v), causal=True),
                 lambda: portattn.attention(short, k, v, causal=True, causal_align="bottom-right")):
        with pytest.raises(ValueError):
            call()


def test_mask_options_have_signatures_of_their_own(remembered):
    """Windows and softcap are part of a call's signature: a remembered windowed or softcapped call replays for the
    same options only (flash_attn_func's too, with as many queries as keys); a window given as a list, or options
    of other types than the checks take as they are, take the checked path."""
    from portattn.flash_attn import flash_attn_func

    q, k, v = torch.randn(1, 4, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64)
    for options in (("top-left", (2, 0), 0.0), ("top-left", None, 5.0)):
        assert eager.signature(q, k, v, True, None, True, options=options) != eager.signature(q, k, v, True, None,
                                                                                             True)
        eager.remember(eager.signature(q, k, v, True, None, True, options=options), stand_in)
    assert torch.equal(portattn.attention(q, k, v, causal=True, window=(2, 0)), q + 1)
    assert torch.equal(portattn.attention(q, k, v, causal=True, softcap=5.0), q + 1)
    assert torch.equal(flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                                       window_size=(2, 0)), (q + 1).transpose(1, 2))
    for call in (lambda: portattn.attention(q, k, v, causal=True),  # no options: not remembered
                 lambda: portattn.attention(q, k, v, causal=True, window=(3, 0)),
                 lambda: portattn.attention(q, k, v, causal=True, window=[2, 0]),
                 lambda: portattn.attention(q, k, v, causal=True, softcap=4.0),
                 lambda: portattn.attention(q, k, v, causal=True, window=(2, 0), softcap=5.0)):
        with pytest.raises(ValueError):
            call()


def test_calls_with_out_replay_into_it(remembered):
    """A call with ``out=`` replays a launch remembered under its own signature (which holds the layout of ``out``),
    writes into ``out`` and counts the write (the stand-in writes through ``.data``, which counts nothing); an
    output made under ``torch.inference_mode``, which has no version counter, is written without an error."""
    q, k, v = (torch.randn(1, 2, 8, 64) for _ in range(3))
    out = torch.empty_like(q)
    with torch.inference_mode():
        frozen = torch.empty_like(q)
    for t in (out, frozen):
        eager.remember(eager.signature(q, k, v, True, None, True, t), lambda q, k, v, out: out.data.copy_(q + 1))
    version = out._version
    assert portattn.attention(q, k, v, causal=True, out=out) is out
    assert torch.equal(out, q + 1) and out._version > version
    with torch.inference_mode():
        assert portattn.attention(q, k, v, causal=True, out=frozen) is frozen
    assert torch.equal(frozen, q + 1)
    with pytest.raises(ValueError):  # out in another layout: another signature, so the checks run (CPU tensors)
        portattn.attention(q, k, v, causal=True, out=torch.empty(1, 8, 2, 64).transpose(1, 2))


def test_other_calls_take_the_checked_path(remembered):
    q, k, v = torch.randn(1, 4, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64)
    remembered(q, k, v, True, None, True)
    for call in (lambda: portattn.attention(q, k, v),  # not causal: another signature
                 lambda: portattn.attention(q, k, v, causal=True, return_lse=True),
                 lambda: portattn.attention(q, k, v, causal=True, window=(4, 0)),
                 lambda: portattn.attention(q.clone().requires_grad_(), k, v, causal=True),
                 lambda: portattn.scaled_dot_product_attention(q, k, v, is_causal=True)):  # heads differ, no GQA
        with pytest.raises(ValueError):  # the checks run: CPU tensors, or the heads rule
            call()


def test_training_calls_have_signatures_of_their_own(remembered):
    """A call whose inputs need gradients has its own signature (which inputs need them, and whether the backward is
    deterministic, as asked or as torch's setting is), so it never replays an inference call; a remembered training
    signature serves the entry points like any other. Under torch.func's transforms nothing replays."""
    q, k, v = (torch.randn(1, 2, 8, 64) for _ in range(3))
    leaf = q.clone().requires_grad_()
    inference = eager.signature(q, k, v, True, None, True)
    training = eager.signature(leaf, k, v, True, None, True)
    assert training is not None and training != inference
    assert training != eager.signature(q, leaf, v, True, None, True)
    assert training != eager.signature(leaf, k, v, True, None, True, deterministic=True)
    with torch.no_grad():
        assert eager.signature(leaf, k, v, True, None, True) == inference
    previous = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(not previous)
        assert eager.signature(leaf, k, v, True, None, True) != training
    finally:
        torch.use_deterministic_algorithms(previous)
    assert eager.signature(leaf, k, v, True, None, True, torch.empty_like(q)) is None  # out= with gradients: refused
    assert eager.signature(leaf, k, v, True, None, True, deterministic=1) is None  # not a bool: the checks raise
    remembered(leaf, k, v, True, None, True)
    result = portattn.attention(leaf, k, v, causal=True)
    assert torch.equal(result, q + 1) and result.requires_grad
    with pytest.raises(ValueError):  # an inference call of the same shapes is not remembered: the checks run
        portattn.attention(q, k, v, causal=True)
    seen = []

    def loss(t):
        seen.append(eager.signature(t, k, v, True, None, True))
        return t.sum()
    torch.func.grad(loss)(q)
    torch.func.vmap(loss)(q)
    assert seen == [None, None]


def test_calls_with_keys_of_any_length_take_a_replay_kept_for_them(monkeypatch):
    """A replay kept for every key length of its calls (the decode launches) serves a call whose only difference is
    the length and strides of k and v (a cache grown by a key, or seen through a [batch, seq, heads, dim] view) and is
    then remembered under that call's own signature; a call whose k and v differ in length, or are not read in place
    (unaligned rows), or differs in anything else, takes the checked path (which raises for CPU tensors)."""
    monkeypatch.setattr(eager, "_replays", {})
    monkeypatch.setattr(eager, "_any_length", {})
    q, k, v = torch.randn(1, 4, 1, 64), torch.randn(1, 2, 300, 64), torch.randn(1, 2, 300, 64)
    key = eager.signature(q, k, v, False, None, True)
    eager.remember_any_length(key, k, v, stand_in)
    for keys in (301, 1, 4096):
        grown = torch.randn(1, 2, keys, 64)
        assert torch.equal(portattn.attention(q, grown, grown.clone()), q + 1)
        assert eager.signature(q, grown, grown, False, None, True) in eager._replays
    bshd = torch.randn(1, 77, 2, 64).transpose(1, 2)
    with portattn.patch_sdpa() as stats:
        assert torch.equal(F.scaled_dot_product_attention(q, bshd, bshd, enable_gqa=True), q + 1)
    assert stats.portattn == 1
    unaligned = torch.randn(1, 2, 300, 65)[..., :64]  # rows 65 elements apart
    for other in (lambda: portattn.attention(q, k, v[:, :, :299]), lambda: portattn.attention(q, unaligned, v),
                  lambda: portattn.attention(q, k, v, causal=True), lambda: portattn.attention(q, k[:, :1], v[:, :1]),
                  lambda: portattn.attention(q, k.double(), v)):
        with pytest.raises((ValueError, TypeError)):
            other()
    assert eager.any_length(key, k[:, :, :0], v[:, :, :0]) is None


def test_kvcache_replays_a_remembered_call(monkeypatch):
    """attention_with_kvcache serves a call of a remembered signature from its replay (here a stand-in), and takes
    the checked path (which refuses CPU tensors) for calls the replay does not cover."""
    from portattn.ops import kvcache

    monkeypatch.setattr(eager, "_replays", {})
    q, cache, new = torch.randn(2, 1, 4, 64), torch.randn(2, 16, 2, 64), torch.randn(2, 1, 2, 64)
    lengths = torch.full((2,), 8, dtype=torch.int32)
    for k in (None, new):
        key = kvcache._signature(q, cache, cache, lengths, k, k, None, True, None, 0, False, None, 0.0, None, None,
                                 None)
        eager.remember(key, lambda q, *rest: q + 1)
        assert torch.equal(portattn.attention_with_kvcache(q, cache, cache, cache_seqlens=lengths, k=k, v=k), q + 1)
    for other in (dict(cache_seqlens=8), dict(cache_seqlens=lengths, return_lse=True),
                  dict(cache_seqlens=lengths, scale=0.5), dict(cache_seqlens=lengths, window=(4, 0)),
                  dict(cache_seqlens=lengths, cache_leftpad=torch.zeros(2, dtype=torch.int32)),
                  dict(cache_seqlens=lengths, k=new[:, :, :1], v=new[:, :, :1])):
        with pytest.raises(ValueError):
            portattn.attention_with_kvcache(q, cache, cache, **other)
    assert kvcache._signature(q.clone().requires_grad_(), cache, cache, lengths, None, None, None, True, None, 0,
                              False, None, 0.0, None, None, None) is None
    assert kvcache._signature(q, cache, cache, lengths, None, None, None, True, None, 0, False, (4.0, 0), 0.0, None,
                              None, None) is None


def test_decode_length_tensors_are_bounded(monkeypatch):
    """Decode-shaped calls keep an int32 length tensor per (batch, keys); with a new key count every call (a cache
    growing by one key per token) the store starts over at its bound instead of growing."""
    from portattn.ops import attention as ops
    from portattn.runtime import loader

    monkeypatch.setattr(loader, "SIGNATURES_KEPT", 8)
    monkeypatch.setattr(ops, "_length_tensors", {})
    for keys in range(100, 120):
        t = ops._lengths(3, keys, torch.device("cpu"))
        assert t.dtype == torch.int32 and t.tolist() == [keys] * 3
        assert len(ops._length_tensors) <= 8
    assert ops._lengths(3, 119, torch.device("cpu")) is t  # kept while the store holds it


def test_signatures_follow_the_verification_overrides_and_environment(monkeypatch):
    """A signature holds None for no verification overrides, the overrides themselves while any are set (each setting
    its own key), and the lane and kernel settings of the environment as they are at the call."""
    from portattn.tools.testing import use_kernel

    q, k, v = torch.randn(1, 4, 8, 64), torch.randn(1, 2, 8, 64), torch.randn(1, 2, 8, 64)
    monkeypatch.delenv("PORTATTN_KERNEL", raising=False)
    plain = eager.signature(q, k, v, False, None, True)
    assert eager.settings()[0] is None and plain[-3:] == eager.settings()
    with use_kernel("simt"):
        simt = eager.signature(q, k, v, False, None, True)
        assert simt[-3].kernel == "simt" and simt != plain
        with use_kernel("mma"):
            assert eager.signature(q, k, v, False, None, True) not in (plain, simt)
    assert eager.signature(q, k, v, False, None, True) == plain
    monkeypatch.setenv("PORTATTN_KERNEL", "simt")
    assert eager.signature(q, k, v, False, None, True)[-1] == "simt"
