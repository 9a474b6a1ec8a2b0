"""The float64 references the GPU tests compare with, checked on the CPU against PyTorch's own SDPA, and on rows that
see no key."""
import math

import torch
import torch.nn.functional as F

from portattn.tools.reference import reference_masked


def leaves(*shapes):
    return [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]


def test_masked_reference_equals_sdpa():
    """Where every row sees a key: PyTorch's SDPA on the same call (causal, boolean and additive masks, grouped
    heads, scale), outputs and gradients."""
    torch.manual_seed(0)
    q, k, v = leaves((2, 6, 37, 32), (2, 2, 50, 32), (2, 2, 50, 32))
    keep = torch.rand(2, 1, 37, 50) > 0.6
    keep[..., 7] = True
    cases = [dict(causal=True), dict(attn_mask=keep, scale=0.3),
             dict(attn_mask=torch.where(keep, torch.randn(keep.shape, dtype=torch.float64), -math.inf))]
    for opts in cases:
        sdpa = {"is_causal" if key == "causal" else key: value for key, value in opts.items()}
        out, _ = reference_masked(q, k, v, **opts)
        ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **sdpa)
        dout = torch.randn_like(out)
        for got, want in zip(torch.autograd.grad(out, (q, k, v), dout), torch.autograd.grad(ref, (q, k, v), dout)):
            assert torch.allclose(got, want, atol=1e-10)
        assert torch.allclose(out, ref, atol=1e-12)


def test_rows_without_keys_have_zero_output_and_finite_gradients():
    """Rows that a mask hides entirely (boolean, additive -inf, or a window) give zeros, LSE -inf and gradients
    without NaN, the same whichever way they are hidden."""
    torch.manual_seed(1)
    q, k, v = leaves((2, 4, 20, 16), (2, 2, 3, 16), (2, 2, 3, 16))
    keep = torch.rand(2, 1, 20, 3) > 0.5
    keep[:, :, :6] = False
    dout = torch.randn(2, 4, 20, 16, dtype=torch.float64)
    additive = torch.where(keep, 0.0, -math.inf).double()
    results = []
    for mask in (keep, additive):
        out, lse = reference_masked(q, k, v, attn_mask=mask)
        hidden = ~keep.any(-1).expand(2, 4, 20)
        assert bool((out[hidden] == 0).all()) and bool((lse[hidden] == -math.inf).all())
        assert bool(torch.isfinite(lse[~hidden]).all())
        grads = torch.autograd.grad(out, (q, k, v), dout)
        assert all(bool(torch.isfinite(g).all()) for g in grads)
        assert bool((grads[0][hidden] == 0).all())
        results.append((out, lse, grads))
    (out_b, lse_b, grads_b), (out_a, lse_a, grads_a) = results
    assert torch.equal(out_b, out_a) and torch.equal(lse_b, lse_a)
    assert all(torch.allclose(a, b) for a, b in zip(grads_a, grads_b))
    out, lse = reference_masked(q, k, v, causal=True, bottom_right=True)  # 20 queries on 3 keys: 17 rows see none
    assert bool((lse[:, :, :17] == -math.inf).all()) and bool((out[:, :, :17] == 0).all())
    assert all(bool(torch.isfinite(g).all()) for g in torch.autograd.grad(out, (q, k, v), dout))
