"""attention_with_kvcache refuses bad arguments with a clear error naming them, before any GPU work (meta tensors,
no GPU needed)."""
import pytest
import torch

import portattn


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


Q, CACHE = meta(2, 1, 8, 64), meta(2, 128, 2, 64)
PAGES, TABLE = meta(10, 32, 2, 64), torch.zeros(2, 4, dtype=torch.int32, device="meta")
IDX = torch.zeros(2, dtype=torch.int32, device="meta")


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(q=meta(2, 8, 64)), ValueError, r"q must be 4-D \[batch, seqlen_q, heads, head_dim\]"),
    (dict(q=Q.float()), TypeError, "k_cache has dtype torch.float16 but q has torch.float32"),
    (dict(q=meta(2, 1, 8, 64, dtype=torch.float64), k_cache=meta(2, 128, 2, 64, dtype=torch.float64),
          v_cache=meta(2, 128, 2, 64, dtype=torch.float64)), TypeError, "q has dtype torch.float64"),
    (dict(v_cache=meta(2, 127, 2, 64)), ValueError, "k_cache and v_cache must have the same shape"),
    (dict(q=meta(2, 1, 8, 48), k_cache=meta(2, 128, 2, 48), v_cache=meta(2, 128, 2, 48)), ValueError,
     "head_dim 48"),
    (dict(q=meta(2, 1, 7, 64)), ValueError, r"q's heads \(7\) must be a multiple of the cache's heads \(2\)"),
    (dict(k_cache=meta(2, 128, 2, 72)[..., :64], v_cache=meta(2, 128, 2, 72)[..., :64]), None, None),
    (dict(k_cache=meta(2, 128, 2, 65)[..., :64], v_cache=meta(2, 128, 2, 65)[..., :64]), ValueError,
     "k_cache must have unit stride along head_dim and 16-byte aligned rows"),
    (dict(q=meta(3, 1, 8, 64)), ValueError, "k_cache holds 2 sequences but q has batch 3"),
    (dict(cache_seqlens=129), ValueError, r"cache_seqlens\[0\] = 129 with 0 new keys does not fit the cache's 128"),
    (dict(cache_seqlens=torch.tensor([3, -1], dtype=torch.int32)), ValueError, r"cache_seqlens\[1\] = -1"),
    (dict(cache_seqlens=torch.tensor([3, 4])), TypeError, "cache_seqlens must be an int or an int32 tensor of shape"),
    (dict(cache_seqlens=2.5), TypeError, "cache_seqlens must be an int or an int32 tensor"),
    (dict(k=meta(2, 1, 2, 64)), ValueError, "k and v must be given together"),
    (dict(cache_seqlens=127, k=meta(2, 2, 2, 64), v=meta(2, 2, 2, 64)), ValueError,
     r"cache_seqlens\[0\] = 127 with 2 new keys"),
    (dict(k=meta(2, 1, 4, 64), v=meta(2, 1, 4, 64)), ValueError, r"k must be \[batch=2, seqlen_new, 2, 64\]"),
    (dict(num_splits=-1), ValueError, "num_splits must be an int >= 0"),
    (dict(k_cache=PAGES, v_cache=PAGES, block_table=TABLE.long()), TypeError, "block_table must be an int32 tensor"),
    (dict(k_cache=PAGES, v_cache=PAGES, block_table=torch.zeros(3, 4, dtype=torch.int32, device="meta")),
     ValueError, r"block_table must be \[batch=2, max_pages\]"),
    (dict(k_cache=meta(10, 24, 2, 64), v_cache=meta(10, 24, 2, 64), block_table=TABLE), ValueError,
     "the page size .* must be a multiple of 16"),
    (dict(k_cache=PAGES, v_cache=PAGES, block_table=TABLE, cache_seqlens=129), ValueError,
     "does not fit the cache's 128 keys"),
    (dict(causal=1), TypeError, "causal must be a bool"),
    (dict(cache_batch_idx=torch.tensor([0, 1])), TypeError, r"cache_batch_idx must be an int32 tensor of shape \[2\]"),
    (dict(k_cache=PAGES, v_cache=PAGES, block_table=TABLE, cache_batch_idx=IDX), ValueError,
     "cache_batch_idx cannot be combined with block_table"),
    (dict(cache_batch_idx=torch.tensor([0, 5], dtype=torch.int32)), ValueError,
     r"cache_batch_idx must lie in \[0, 2\)"),
    (dict(cache_batch_idx=torch.tensor([1, 1], dtype=torch.int32), k=meta(2, 1, 2, 64), v=meta(2, 1, 2, 64)),
     ValueError, "cache_batch_idx must not repeat a sequence"),
    (dict(q=meta(3, 1, 8, 64), cache_batch_idx=torch.tensor([1, 0, 1], dtype=torch.int32)), None, None),
    (dict(cache_leftpad=torch.tensor([0, 6], dtype=torch.int32)), ValueError,
     r"cache_leftpad\[1\] = 6 must lie in \[0, cache_seqlens\[1\] = 5\]"),
    (dict(cache_leftpad=torch.zeros(2, dtype=torch.int32, device="meta")), None, None),
    (dict(window=(3,)), ValueError, "window must be a pair of ints"),
    (dict(softcap=-1.0), ValueError, "softcap must be a finite number >= 0"),
    (dict(return_lse=1), TypeError, "return_lse must be a bool, got int"),
    (dict(alibi_slopes=torch.zeros(2, 8, device="meta")), None, None),
    (dict(alibi_slopes=torch.zeros(3, 8, device="meta")), ValueError, r"alibi_slopes must be float32 \[heads_q\]"),
    (dict(alibi_slopes=torch.zeros(2, device="meta")), ValueError, "heads_q = 8"),
])
def test_bad_arguments(kwargs, exc, match):
    args = dict(q=Q, k_cache=CACHE, v_cache=CACHE, cache_seqlens=5) | kwargs
    q, k_cache, v_cache = args.pop("q"), args.pop("k_cache"), args.pop("v_cache")
    if exc is None:  # a valid call: it gets as far as the device check
        exc, match = ValueError, "portattn runs on a GPU: q is on meta"
    with pytest.raises(exc, match=match):
        portattn.attention_with_kvcache(q, k_cache, v_cache, **args)


def test_not_differentiable():
    q = meta(2, 1, 8, 64).requires_grad_()
    with pytest.raises(RuntimeError, match="not differentiable"):
        portattn.attention_with_kvcache(q, CACHE, CACHE, cache_seqlens=5)
