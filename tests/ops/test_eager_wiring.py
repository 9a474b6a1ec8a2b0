"""The replay of repeated eager calls (ops/eager.py) as each entry point uses it, without a GPU: a launch remembered
under a call's signature (here a stand-in that writes a known result) serves ``portattn.attention``,
``portattn.scaled_dot_product_attention`` and the SDPA patch, counted by the patch; a call of another signature, or
one that needs a gradient, does not use it. The kernels' own replays run in tests/ops/test_eager_replay.py (GPU)."""
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
        eager.remember(eager.signature(q, k, v, causal, scale, gqa), lambda q, k, v, out: out.copy_(q + 1))
    return remember


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
