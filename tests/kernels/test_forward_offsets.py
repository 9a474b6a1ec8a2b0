"""Tensors of more than 2**31 elements: every float32 forward kernel computes its offsets in 64 bits. One test
that allocates the inputs once (32 GiB) and runs each kernel on them in turn, so that parallel test processes do
not hold several such sets at once."""
import contextlib

import pytest
import torch

import portattn
from portattn.kernels.forward import select
from portattn.tools.reference import reference_attention, relative_error
from portattn.tools.testing import tweak_variant, use_kernel

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target")]


def test_offsets_beyond_32_bits(gen, on_target):
    b, h, n, d = 2048, 16, 1024, 64  # 2**31 elements per tensor
    q, k, v = (torch.empty(b, h, n, d, device="cuda").normal_(generator=gen) for _ in range(3))
    out = torch.empty_like(q)

    def matrix_unit(spec):
        return select(on_target, spec.dtype, spec.head_dim, "mma") if spec.kernel == "ws" else spec

    runs = {"default": contextlib.nullcontext, "mma": lambda: tweak_variant(matrix_unit),
            "simt": lambda: use_kernel("simt")}
    for name, context in runs.items():
        out.fill_(float("nan"))
        with context():
            portattn.attention(q, k, v, causal=True, out=out)
        for bi, hi in ((0, 0), (b - 1, h - 1), (b // 2 + 1, 7)):
            s = slice(bi, bi + 1), slice(hi, hi + 1)
            ref, _ = reference_attention(q[s], k[s], v[s], True)
            assert relative_error(out[s], ref) <= 1e-5, (name, bi, hi)
    del q, k, v, out
    torch.cuda.empty_cache()
