"""Bad input raises a clear exception naming the argument (no GPU needed: checks run before any launch)."""
import math

import pytest
import torch

import portattn


def t(*shape, dtype=torch.float32, device="cpu"):
    return torch.zeros(*shape, dtype=dtype, device=device)


Q = t(2, 4, 8, 64)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        (([[0.0]], Q, Q), TypeError, "q must be a torch.Tensor, got list"),
        ((Q, [1], Q), TypeError, "k must be a torch.Tensor"),
        ((t(4, 8, 64), Q, Q), ValueError, r"q must be 4-D .* got shape \(4, 8, 64\)"),
        ((Q, Q, t(1, 2, 4, 8, 64)), ValueError, "v must be 4-D"),
        ((Q, t(2, 4, 8, 64, dtype=torch.float64), Q), TypeError, "k has dtype torch.float64 but q has torch.float32"),
        ((Q, Q, t(2, 4, 8, 64, dtype=torch.float16)), TypeError, "v has dtype"),
        ((t(2, 4, 8, 64, dtype=torch.float64),) * 3, TypeError, "supported: torch.float32"),
        ((t(2, 4, 8, 64, dtype=torch.int32),) * 3, TypeError, "q has dtype torch.int32"),
        ((t(2, 4, 8, 64, dtype=torch.bfloat16),) * 3, ValueError, "portattn runs on a GPU: q is on cpu"),
        ((Q, t(2, 4, 9, 64), Q), ValueError, "k and v must have the same shape"),
        ((Q, t(3, 4, 8, 64), t(3, 4, 8, 64)), ValueError, "k has batch size 3 but q has 2"),
        ((Q, t(2, 4, 8, 32), t(2, 4, 8, 32)), ValueError, "k has head_dim 32 but q has 64"),
        ((Q, t(2, 3, 8, 64), t(2, 3, 8, 64)), ValueError, r"q's heads \(4\) must be a multiple of k/v's heads \(3\)"),
        ((t(2, 4, 8, 48),) * 3, ValueError, "head_dim 48; supported head dims: 32, 64, 96, 128, 256"),
        ((Q, t(2, 4, 8, 64, device="meta"), Q), ValueError, "k is on meta but q is on cpu"),
        ((Q, Q, Q), ValueError, "portattn runs on a GPU: q is on cpu"),
    ],
)
def test_bad_inputs(args, exc, match):
    with pytest.raises(exc, match=match):
        portattn.attention(*args)


def test_cpu_error_says_gpu_needed_even_when_empty():
    with pytest.raises(ValueError, match="GPU"):
        portattn.attention(t(0, 4, 8, 64), t(0, 4, 8, 64), t(0, 4, 8, 64))


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"causal": 1}, TypeError, "causal must be a bool"),
    ({"scale": "0.1"}, TypeError, "scale must be a finite real number"),
    ({"scale": float("nan")}, TypeError, "scale must be a finite real number"),
    ({"scale": True}, TypeError, "scale must be"),
    ({"return_lse": 1}, TypeError, "return_lse must be a bool, got int"),
    ({"softcap": torch.zeros(2)}, ValueError, "softcap must be a finite number >= 0"),
])
def test_bad_options(kwargs, exc, match):
    q = t(1, 1, 4, 64, device="meta")
    with pytest.raises(exc, match=match):
        portattn.attention(q, q, q, **kwargs)


def test_inputs_that_require_grad_pass_the_checks():
    q = t(1, 1, 4, 64, device="meta").requires_grad_()
    with pytest.raises(ValueError, match="portattn runs on a GPU: q is on meta"):
        portattn.attention(q, q, q)
    with pytest.raises(TypeError, match="deterministic must be a bool or None"):
        portattn.attention(q, q, q, deterministic=1)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"attn_mask": t(3, 8)}, ValueError, r"attn_mask of shape \(3, 8\) does not broadcast"),
    ({"attn_mask": t(8, 8, dtype=torch.int32)}, TypeError, "attn_mask must be torch.bool or torch.float32"),
    ({"attn_mask": t(8, 8), "is_causal": True}, ValueError, "attn_mask and is_causal cannot both be set"),
    ({"dropout_p": 0.1}, NotImplementedError, "dropout_p=0.1"),
    ({"dropout_p": torch.zeros(())}, TypeError, "dropout_p a number"),
])
def test_sdpa_unsupported_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        portattn.scaled_dot_product_attention(Q, Q, Q, **kwargs)


BSHD = t(2, 8, 4, 64)


@pytest.mark.parametrize("args, kwargs, exc, match", [
    ((t(2, 8, 64), BSHD, BSHD), {}, ValueError,
     r"q must be 4-D \[batch, seq, heads, head_dim\], got shape \(2, 8, 64\)"),
    ((BSHD, [0.0], BSHD), {}, TypeError, "k must be a torch.Tensor, got list"),
    ((BSHD, BSHD, BSHD), {"dropout_p": torch.zeros(())}, TypeError, "dropout_p must be a number, got Tensor"),
    ((BSHD, BSHD, BSHD), {"return_attn_probs": 1}, TypeError, "return_attn_probs must be a bool, got int"),
    ((BSHD, BSHD, BSHD), {"return_attn_probs": True}, NotImplementedError, "return_attn_probs=True"),
])
def test_flash_attn_func_bad_arguments(args, kwargs, exc, match):
    from portattn.flash_attn import flash_attn_func

    with pytest.raises(exc, match=match):
        flash_attn_func(*args, **kwargs)


PACKED, CU, Q1, CACHE = t(10, 4, 64), torch.tensor([0, 4, 10], dtype=torch.int32), t(2, 1, 4, 64), t(2, 32, 2, 64)
NEW, ANGLES = t(2, 1, 2, 64), t(33, 16)


@pytest.mark.parametrize("fn, args, kwargs, exc, match", [
    ("flash_attn_varlen_func", (PACKED, PACKED, PACKED, CU, CU, 6, 6), {"alibi_slopes": (1, 2)}, TypeError,
     "alibi_slopes must be a torch.Tensor, got tuple"),
    ("flash_attn_with_kvcache", (Q1, t(64), CACHE), {}, ValueError,
     r"k_cache must be 4-D \[batch, capacity, heads_kv, head_dim\] or pages, got shape \(64,\)"),
    ("flash_attn_with_kvcache", (t(64), CACHE, CACHE), {}, ValueError,
     r"q must be 4-D \[batch, seq, heads, head_dim\], got shape \(64,\)"),
    ("flash_attn_with_kvcache", (Q1, CACHE, CACHE), {"causal": 1}, TypeError, "causal must be a bool, got int"),
    ("flash_attn_with_kvcache", (Q1, CACHE, CACHE), dict(k=NEW, v=NEW, rotary_cos=ANGLES, rotary_sin=ANGLES,
                                                         cache_seqlens=5, rotary_interleaved=1), TypeError,
     "rotary_interleaved must be a bool, got int"),
    ("flash_attn_with_kvcache", (Q1, CACHE, CACHE), dict(k=t(2, 64), v=NEW, rotary_cos=ANGLES, rotary_sin=ANGLES),
     ValueError, r"k must be 4-D \[batch, seqlen_new, heads_kv, head_dim\], got shape \(2, 64\)"),
    # the arguments the rotation indexes with are checked before it
    ("flash_attn_with_kvcache", (t(4, 1, 4, 64), CACHE, CACHE), dict(k=NEW, v=NEW, rotary_cos=ANGLES,
                                                                     rotary_sin=ANGLES, cache_seqlens=5),
     ValueError, "k_cache holds 2 sequences but q has batch 4"),
    ("flash_attn_with_kvcache", (Q1, CACHE, CACHE), dict(k=NEW, v=NEW, rotary_cos=ANGLES, rotary_sin=ANGLES),
     ValueError, "cache_seqlens\\[0\\] = 32 with 1 new keys does not fit the cache's 32 keys"),
    # without cache_seqlens every sequence fills its cache: paged, all the pages of its table
    ("flash_attn_with_kvcache", (Q1, t(6, 16, 2, 64), t(6, 16, 2, 64)),
     dict(k=NEW, v=NEW, block_table=torch.zeros(2, 3, dtype=torch.int32)), ValueError,
     "cache_seqlens\\[0\\] = 48 with 1 new keys does not fit the cache's 48 keys"),
    ("flash_attn_with_kvcache", (Q1, CACHE, CACHE), dict(k=NEW, v=NEW, rotary_cos=t(31, 16), rotary_sin=t(31, 16),
                                                         cache_seqlens=5), ValueError,
     r"seqlen_ro >= the cache's 32 positions .* got \(31, 16\)"),
    ("flash_attn_with_kvcache", (Q1, CACHE, CACHE), dict(k=NEW, v=NEW, rotary_cos=t(33, 16, dtype=torch.int32),
                                                         rotary_sin=t(33, 16, dtype=torch.int32), cache_seqlens=5),
     ValueError, "rotary_cos and rotary_sin must be floating"),
    ("flash_attn_with_kvcache", (Q1, CACHE, CACHE), dict(k=NEW, v=NEW, rotary_cos=ANGLES, cache_seqlens=5,
                                                         rotary_sin=t(33, 16, device="meta")),
     ValueError, "rotary_sin is on meta but q is on cpu"),
])
def test_flash_attn_packed_and_cache_bad_arguments(fn, args, kwargs, exc, match):
    import portattn.flash_attn

    with pytest.raises(exc, match=match):
        getattr(portattn.flash_attn, fn)(*args, **kwargs)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"causal_align": "middle"}, ValueError, "causal_align must be"),
    ({"window": (3,)}, ValueError, "window must be a pair of ints"),
    ({"window": (-2, 0)}, ValueError, "window must be a pair of ints"),
    ({"softcap": -1.0}, ValueError, "softcap must be a finite number >= 0"),
    ({"alibi_slopes": t(3)}, ValueError, "alibi_slopes must be float32 \\[heads_q\\]"),
    ({"alibi_slopes": [0.1] * 4}, TypeError, "alibi_slopes must be a torch.Tensor"),
    ({"attn_mask": t(8, 8, dtype=torch.float16)}, TypeError, "attn_mask must be"),
])
def test_bad_mask_options(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        portattn.attention(Q, Q, Q, **kwargs)


def test_sdpa_shape_rules():
    with pytest.raises(ValueError, match="query must be 4-D"):
        portattn.scaled_dot_product_attention(t(4, 8, 64), Q, Q)
    with pytest.raises(ValueError, match="value has head_dim 32 but query has 64"):
        portattn.scaled_dot_product_attention(Q, Q, t(2, 4, 8, 32))
    kv = t(2, 2, 8, 64)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        portattn.scaled_dot_product_attention(Q, kv, kv)


def test_out_argument_is_checked():
    q = t(1, 1, 4, 64, device="meta")
    with pytest.raises(ValueError, match="out must match q"):
        portattn.attention(q, q, q, out=t(1, 1, 5, 64, device="meta"))
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        portattn.attention(q, q, q, out=3)


# Random arguments, mostly malformed: every call must end in a clear error of the documented kinds (TypeError,
# ValueError, NotImplementedError), never another exception from deep inside; on these CPU and meta tensors a call
# that passes every check ends in the "runs on a GPU" ValueError.
CLEAR_ERRORS = (TypeError, ValueError, NotImplementedError)


def _tensor(rng):
    dims = rng.choice((0, 1, 2, 3, 4, 4, 4, 5))
    shape = [rng.choice((0, 1, 2, 3, 4, 8, 64)) for _ in range(dims)]
    if dims >= 1 and rng.random() < 0.7:
        shape[-1] = rng.choice((16, 32, 48, 64, 80, 128, 256, 512))
    dtype = rng.choice((torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.bool))
    # shapes of up to 64**4 * 512 elements: the large ones only as meta tensors, which hold no memory
    device = rng.choice(("cpu", "meta")) if math.prod(shape) <= 1 << 22 else "meta"
    x = torch.zeros(shape, dtype=dtype, device=device)
    if dims >= 2 and rng.random() < 0.2:
        x = x.transpose(-1, -2)
    return x


def _expect_clear_error(call, fn, args, kwargs):
    """``fn(*args, **kwargs)`` ends in one of CLEAR_ERRORS."""
    try:
        fn(*args, **kwargs)
    except CLEAR_ERRORS:
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"call {call}: {fn.__name__}: {type(e).__name__}: {e}; {_describe(args)}, {kwargs}") from e
    raise AssertionError(f"call {call}: {fn.__name__} returned on {_describe(args)}, {kwargs}")


def _describe(args):
    return [(tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args]


def _value(rng, *valid):
    """One of ``valid`` or a malformed value of a random kind."""
    odd = (None, True, -1, 0, 3, 1.5, float("nan"), float("inf"), -0.5, "x", [1, 2], (1, 2, 3), (-2, 4), (4, -1),
           {"a": 1}, object(), _tensor(rng))
    return rng.choice(valid) if valid and rng.random() < 0.6 else rng.choice(odd)


def test_fuzz_bad_arguments_of_attention(rng):
    for call in range(300):
        b, hq, n, d = rng.choice((1, 2)), rng.choice((2, 4)), rng.choice((1, 8)), rng.choice((32, 64, 48))
        dtype = rng.choice((torch.float16, torch.float32, torch.float64))
        device = rng.choice(("cpu", "meta"))
        good = torch.zeros(b, hq, n, d, dtype=dtype, device=device)
        q, k, v = (good if rng.random() < 0.7 else _tensor(rng) for _ in range(3))
        valid = {"causal": (True, False), "scale": (0.1, None), "return_lse": (True, False),
                 "deterministic": (True, None), "causal_align": ("top-left", "bottom-right"),
                 "window": ((3, 0), (-1, 2)), "softcap": (0.0, 2.0),
                 "alibi_slopes": (torch.zeros(hq, device=device),),
                 "attn_mask": (torch.ones(n, n, dtype=torch.bool, device=device),), "out": (torch.empty_like(good),)}
        kwargs = {name: _value(rng, *choices) for name, choices in valid.items() if rng.random() < 0.3}
        _expect_clear_error(call, portattn.attention, (q, k, v), kwargs)


def test_fuzz_bad_arguments_of_attention_with_kvcache(rng):
    for call in range(300):
        b, nq, hq, hk, d, cap = rng.choice((1, 2)), rng.choice((1, 3)), 4, 2, 64, 32
        device = rng.choice(("cpu", "meta"))
        q = torch.zeros(b, nq, hq, d, dtype=torch.float16, device=device)
        cache = torch.zeros(b, cap, hk, d, dtype=torch.float16, device=device)
        args = [q if rng.random() < 0.7 else _tensor(rng)] + [cache if rng.random() < 0.7 else _tensor(rng)
                                                              for _ in range(2)]
        lengths = torch.full((b,), 5, dtype=torch.int32, device=device)
        new = torch.zeros(b, nq, hk, d, dtype=torch.float16, device=device)
        table = torch.zeros(b, 2, dtype=torch.int32, device=device)
        valid = {"cache_seqlens": (5, lengths), "k": (new,), "v": (new,), "block_table": (table,),
                 "causal": (True, False), "scale": (0.1, None), "num_splits": (0, 2), "return_lse": (True,),
                 "window": ((3, 0),), "softcap": (1.0,), "alibi_slopes": (torch.zeros(hq, device=device),),
                 "cache_batch_idx": (torch.arange(b, dtype=torch.int32, device=device),),
                 "cache_leftpad": (torch.zeros(b, dtype=torch.int32, device=device),)}
        kwargs = {name: _value(rng, *choices) for name, choices in valid.items()
                  if name == "cache_seqlens" or rng.random() < 0.25}
        _expect_clear_error(call, portattn.attention_with_kvcache, args, kwargs)


def test_fuzz_bad_arguments_of_sdpa_and_flash_attn(rng):
    """portattn's scaled_dot_product_attention and flash_attn_func on random, mostly malformed arguments."""
    from portattn.flash_attn import flash_attn_func

    for call in range(300):
        b, h, n, d = rng.choice((1, 2)), rng.choice((2, 4)), rng.choice((1, 8)), rng.choice((32, 64, 48))
        device = rng.choice(("cpu", "meta"))
        good = torch.zeros(b, h, n, d, dtype=rng.choice((torch.float16, torch.float32)), device=device)
        tensors = [good if rng.random() < 0.7 else _tensor(rng) for _ in range(3)]
        if rng.random() < 0.5:
            fn = portattn.scaled_dot_product_attention
            valid = {"attn_mask": (torch.ones(n, n, dtype=torch.bool, device=device),), "dropout_p": (0.0,),
                     "is_causal": (True, False), "scale": (0.2, None), "enable_gqa": (True, False)}
        else:
            fn = flash_attn_func
            valid = {"dropout_p": (0.0,), "softmax_scale": (0.2, None), "causal": (True, False),
                     "window_size": ((-1, -1), (4, 0)), "softcap": (0.0, 1.0),
                     "alibi_slopes": (torch.zeros(n, device=device),), "deterministic": (True, False),
                     "return_attn_probs": (False,)}
        kwargs = {name: _value(rng, *choices) for name, choices in valid.items() if rng.random() < 0.3}
        _expect_clear_error(call, fn, tensors, kwargs)


def test_fuzz_bad_arguments_of_the_flash_attn_packed_and_cache_functions(rng):
    """flash_attn_varlen_func and flash_attn_with_kvcache on random, mostly malformed arguments."""
    from portattn.flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

    for call in range(300):
        device = rng.choice(("cpu", "meta"))
        if rng.random() < 0.5:
            fn = flash_attn_varlen_func
            packed = torch.zeros(10, 4, 64, dtype=torch.float16, device=device)
            cu = torch.tensor([0, 4, 10], dtype=torch.int32, device=device)
            args = [packed if rng.random() < 0.8 else _tensor(rng) for _ in range(3)]
            args += [cu if rng.random() < 0.8 else _value(rng) for _ in range(2)]
            args += [_value(rng, 6, 10) for _ in range(2)]
            valid = {"dropout_p": (0.0,), "softmax_scale": (0.2, None), "causal": (True, False),
                     "window_size": ((-1, -1), (4, 0)), "softcap": (0.0, 1.0), "deterministic": (True, False),
                     "alibi_slopes": (torch.zeros(2, 4, device=device),), "return_attn_probs": (False,),
                     "block_table": (None,)}
        else:
            fn = flash_attn_with_kvcache
            q = torch.zeros(2, 1, 4, 64, dtype=torch.float16, device=device)
            cache = torch.zeros(2, 32, 2, 64, dtype=torch.float16, device=device)
            args = [q if rng.random() < 0.8 else _tensor(rng)] + [cache if rng.random() < 0.8 else _tensor(rng)
                                                                  for _ in range(2)]
            new = torch.zeros(2, 1, 2, 64, dtype=torch.float16, device=device)
            angles = torch.zeros(33, 16, device=device)
            valid = {"k": (new, None), "v": (new, None), "rotary_cos": (angles,), "rotary_sin": (angles,),
                     "cache_seqlens": (5, torch.full((2,), 5, dtype=torch.int32, device=device)),
                     "softmax_scale": (0.2,), "causal": (True,), "window_size": ((-1, -1),), "softcap": (0.0,),
                     "rotary_interleaved": (True, False), "num_splits": (0, 2), "return_softmax_lse": (True,)}
        kwargs = {name: _value(rng, *choices) for name, choices in valid.items() if rng.random() < 0.3}
        _expect_clear_error(call, fn, args, kwargs)
