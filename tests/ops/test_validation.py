"""Bad input raises a clear exception naming the argument (no GPU needed: checks run before any launch)."""
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
])
def test_sdpa_unsupported_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        portattn.scaled_dot_product_attention(Q, Q, Q, **kwargs)


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
