"""Decoding over KV caches (attention_with_kvcache and decode-shaped attention calls) against float64, on every
target the machine executes: random lengths, contiguous and paged caches with scattered page tables, grouped-query
ratios, query lengths 1-16, forced and automatic key splits, appends in place."""
import math
import threading

import pytest
import torch

import portattn
from portattn.kernels import decode
from portattn.ops import eager
from portattn.tools.reference import reference_attention, relative_error
from portattn.tools.testing import capture_graph

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target")]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def rand(gen, dtype, *shape):
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def reference(q, keys, values, lengths, causal, scale=None):
    """float64 attention per sequence: q [B, Nq, Hq, D], keys/values [B, >= L, Hk, D] (first L rows used);
    bottom-right causal. Returns out [B, Nq, Hq, D] and lse [B, Hq, Nq]."""
    b_n, nq, hq, d = q.shape
    group = hq // keys.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.full((b_n, hq, nq), -math.inf, dtype=torch.float64, device=q.device)
    scale = d**-0.5 if scale is None else scale
    for b, n in enumerate(lengths):
        if n == 0:
            continue
        qs = q[b].double().transpose(0, 1)  # [Hq, Nq, D]
        ks = keys[b, :n].double().transpose(0, 1).repeat_interleave(group, 0)
        vs = values[b, :n].double().transpose(0, 1).repeat_interleave(group, 0)
        s = qs @ ks.transpose(-1, -2) * scale
        if causal:
            i = torch.arange(nq, device=q.device)[:, None]
            j = torch.arange(n, device=q.device)[None, :]
            s = s.masked_fill(j > n - nq + i, -math.inf)
        row_lse = torch.logsumexp(s, -1)
        p = torch.exp(s - row_lse[..., None]).nan_to_num(0.0)
        out[b] = (p @ vs).transpose(0, 1)
        lse[b] = row_lse
    return out, lse


def paged(cache: torch.Tensor, page_size: int, gen) -> tuple[torch.Tensor, torch.Tensor]:
    """The same keys in a pool of pages [P, page_size, H, D] under a scattered block table [B, pages]."""
    b_n, cap, h, d = cache.shape
    per_seq = cap // page_size
    order = torch.randperm(b_n * per_seq + 3, device="cuda", generator=gen)  # a few pages nobody uses
    pool = torch.full((b_n * per_seq + 3, page_size, h, d), float("nan"), device="cuda", dtype=cache.dtype)
    table = order[: b_n * per_seq].view(b_n, per_seq).to(torch.int32)
    pool[table.flatten().long()] = cache.view(b_n * per_seq, page_size, h, d)
    return pool, table


@pytest.fixture
def plan_afresh(monkeypatch):
    """Decode calls plan their launches (and so load their kernels) afresh, not from calls made before the test or
    before each call of the returned function; the kept launches of other tests come back afterwards."""
    kept = [(decode, "_calls"), (decode, "_shapes"), (eager, "_replays")]
    for module, name in kept:
        monkeypatch.setattr(module, name, {})

    def clear():
        for module, name in kept:
            getattr(module, name).clear()
    return clear


def check(got, ref, dtype, lse=None, ref_lse=None):
    assert not torch.isnan(got).any(), "NaN in the output"
    assert relative_error(got, ref) <= TOL[dtype], relative_error(got, ref)
    if lse is not None:
        finite = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse), finite)
        assert relative_error(lse[finite], ref_lse[finite]) <= 1e-5


@pytest.mark.parametrize("splits", [0, 1, 3, 40])
@pytest.mark.parametrize("nq", [1, 4, 16])
@pytest.mark.parametrize("hq,hk", [(8, 8), (32, 8), (8, 1)])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_contiguous_cache(gen, dtype, hq, hk, nq, splits):
    b, cap, d = 3, 700, 128
    lengths = [700, 1, 333][:b]
    lengths = [max(n, nq) for n in lengths]
    q = rand(gen, dtype, b, nq, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, num_splits=splits,
                                               return_lse=True)
    ref, ref_lse = reference(q, k_cache, v_cache, lengths, causal=True)
    check(out, ref, dtype, lse, ref_lse)


@pytest.mark.parametrize("page_size", [16, 48, 256])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_paged_cache_matches_contiguous(gen, dtype, d, page_size):
    b, hq, hk, nq = 2, 8, 2, 2
    cap = page_size * -(-600 // page_size)
    lengths = [600, 37]
    q = rand(gen, dtype, b, nq, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    k_pool, table = paged(k_cache, page_size, gen)
    v_pool = torch.full_like(k_pool, float("nan"))
    v_pool[table.flatten().long()] = v_cache.view(-1, page_size, hk, d)
    out = portattn.attention_with_kvcache(q, k_pool, v_pool, cache_seqlens=seqlens, block_table=table)
    ref, _ = reference(q, k_cache, v_cache, lengths, causal=True)
    check(out, ref, dtype)
    contiguous = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens)
    assert relative_error(out, contiguous.double()) <= TOL[dtype]


@pytest.mark.parametrize("paged_cache", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("nq", [1, 16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_long_and_short_splits_take_their_attend_kernels(gen, monkeypatch, plan_afresh, on_target, dtype, d, nq,
                                                         paged_cache):
    """Splits of at least SWIZZLED_MIN_TILES key tiles take the plan's attend kernel (NVIDIA: swizzled shared
    tiles), shorter ones its padded-row kernel; both match float64 (grouped heads, one and several query positions,
    contiguous and paged caches)."""
    b, hq, hk, cap, page = 2, 16, 2, 1024, 64
    lengths = [1000, 517]
    q = rand(gen, dtype, b, nq, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    k_in, v_in, table = k_cache, v_cache, None
    if paged_cache:
        k_in, table = paged(k_cache, page, gen)
        v_in = torch.full_like(k_in, float("nan"))
        v_in[table.flatten().long()] = v_cache.view(-1, page, hk, d)
    ref, _ = reference(q, k_cache, v_cache, lengths, causal=True)
    plan = decode.select(on_target, str(dtype).removeprefix("torch."), d, hq // hk * nq)
    launched = []
    compiled = decode.loader.kernel_function
    monkeypatch.setattr(decode.loader, "kernel_function", lambda spec, *a: launched.append(spec) or compiled(spec, *a))
    for splits, attend in ((1, plan.attend), (32, plan.short_attend)):  # 1000 keys; 32 keys (one tile) per split
        launched.clear()
        out = portattn.attention_with_kvcache(q, k_in, v_in, cache_seqlens=seqlens, block_table=table,
                                               num_splits=splits)
        check(out, ref, dtype)
        assert [s for s in launched if s.stage == "attend"] == [attend]


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_many_splits_take_each_combine_layout(gen, monkeypatch, plan_afresh, on_target, dtype):
    """Calls of few and of many key splits (up to MAX_SPLITS; asking for more takes MAX_SPLITS) launch the combine
    kernel of their layout, whose slots merge several splits each, and match float64."""
    b, hq, hk, d = 2, 8, 1, 64
    plan = decode.select(on_target, str(dtype).removeprefix("torch."), d, hq // hk)
    cap = 256 * plan.attend.tile.block_n  # 256 key tiles
    lengths = [cap, 3001]
    q = rand(gen, dtype, b, 1, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    ref, ref_lse = reference(q, k_cache, v_cache, lengths, causal=True)
    launched = []  # (function, blocks) of each launch planned
    launch = decode.loader.Launch
    monkeypatch.setattr(decode.loader, "Launch", lambda target, fn, grid, *a: launched.append((fn, grid)) or launch(
        target, fn, grid, *a))
    kernel = lambda spec: decode.loader.kernel_function(spec, on_target, q.device.index)  # noqa: E731
    # splits asked for -> taken: whole key tiles per split (100: three tiles each, 86 splits), at most MAX_SPLITS
    for asked, taken in ((8, 8), (64, 64), (100, 86), (128, 128), (256, 256), (1024, decode.MAX_SPLITS)):
        launched.clear()
        plan_afresh()
        out, lse = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, num_splits=asked,
                                                   return_lse=True)
        check(out, ref, dtype, lse, ref_lse)
        combine = plan.combines[decode.combine_layout(taken)]
        rows_per_block = combine.tile.block_m // decode.combine_groups(taken)
        keys_per_split = -(-256 // taken) * plan.attend.tile.block_n
        assert launched == [(kernel(decode.attend_kernel(plan, keys_per_split)), b * taken),
                            (kernel(combine), -(-b * hq // rows_per_block))]


@pytest.mark.parametrize("paged_cache", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_append_in_place(gen, dtype, paged_cache):
    """New keys and values land after each sequence's keys, in place; nothing else in the cache changes."""
    b, cap, hq, hk, d, new = 3, 256, 8, 4, 64, 3
    lengths = [0, 100, 250]
    q = rand(gen, dtype, b, new, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    k_new, v_new = rand(gen, dtype, b, new, hk, d), rand(gen, dtype, b, new, hk, d)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    for i, n in enumerate(lengths):
        expected_k[i, n:n + new], expected_v[i, n:n + new] = k_new[i], v_new[i]
    table = None
    if paged_cache:
        k_cache, table = paged(k_cache, 32, gen)
        v_pool = torch.full_like(k_cache, float("nan"))
        v_pool[table.flatten().long()] = v_cache.view(-1, 32, hk, d)
        v_cache = v_pool
    before_k = k_cache.clone()
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, k=k_new, v=v_new,
                                          block_table=table)
    ref, _ = reference(q, expected_k, expected_v, [n + new for n in lengths], causal=True)
    check(out, ref, dtype)
    if paged_cache:
        got_k = k_cache[table.long()].flatten(1, 2)
        untouched = torch.ones(k_cache.shape[0], dtype=torch.bool, device="cuda")
        untouched[table.flatten().long()] = False
        assert torch.equal(k_cache[untouched].isnan(), before_k[untouched].isnan()), "pages of no sequence changed"
    else:
        got_k = k_cache
    assert torch.equal(got_k, expected_k)


@pytest.mark.parametrize("scale", [0.2, 0.0, -0.3])
@pytest.mark.parametrize("causal", [False, True])
def test_causal_and_scale(gen, causal, scale):
    """Any scale, zero and negative ones included, with the masked last key tile (299 keys) and, causal, the
    masked diagonal of five query rows."""
    dtype, b, cap, hq, hk, d, nq = torch.bfloat16, 2, 300, 16, 4, 128, 5
    q = rand(gen, dtype, b, nq, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    out, lse = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=299, causal=causal, scale=scale,
                                               return_lse=True)
    ref, ref_lse = reference(q, k_cache, v_cache, [299, 299], causal=causal, scale=scale)
    check(out, ref, dtype, lse, ref_lse)


def test_rows_without_keys_give_zeros(gen):
    """Bottom-right causal with fewer keys than query positions: the first positions see no key (flash-attn's
    convention: zeros and LSE -inf)."""
    dtype, b, nq = torch.float16, 2, 6
    q = rand(gen, dtype, b, nq, 4, 64)
    k_cache, v_cache = rand(gen, dtype, b, 64, 4, 64), rand(gen, dtype, b, 64, 4, 64)
    seqlens = torch.tensor([3, 0], dtype=torch.int32, device="cuda")
    out, lse = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, return_lse=True)
    ref, ref_lse = reference(q, k_cache, v_cache, [3, 0], causal=True)
    check(out, ref, dtype, lse, ref_lse)
    assert torch.equal(out[1], torch.zeros_like(out[1])) and torch.isinf(lse[1]).all()


def test_bad_lengths_and_pages_on_the_gpu_give_nan(gen):
    """Lengths and page tables that live on the GPU are checked by the kernels: NaN for the sequences they break,
    never a read or write outside the cache, the other sequences unharmed."""
    dtype, b, hq, hk, d = torch.float16, 3, 4, 2, 64
    q = rand(gen, dtype, b, 1, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, 128, hk, d), rand(gen, dtype, b, 128, hk, d)
    seqlens = torch.tensor([50, 129, -2], dtype=torch.int32, device="cuda")
    out = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, num_splits=2)
    assert out[1:].isnan().all() and not out[0].isnan().any()
    check(out[:1], reference(q[:1], k_cache[:1], v_cache[:1], [50], causal=True)[0], dtype)
    pool, table = paged(k_cache, 32, gen)
    table[0, 1] = pool.shape[0] + 5
    out = portattn.attention_with_kvcache(q, pool, pool, cache_seqlens=torch.tensor(
        [100, 10, 10], dtype=torch.int32, device="cuda"), block_table=table)
    assert out[0].isnan().all() and not out[1:].isnan().any()


@pytest.mark.parametrize("nq", [1, 3, 16])
@pytest.mark.parametrize("hq,hk", [(32, 8), (8, 1)])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_decode_shaped_attention_calls(gen, dtype, hq, hk, nq):
    """portattn.attention with a few query rows (not causal) runs on the decode kernels: the SDPA patch's calls
    during generation."""
    q = rand(gen, dtype, 2, hq, nq, 128)
    k, v = rand(gen, dtype, 2, hk, 1500, 128), rand(gen, dtype, 2, hk, 1500, 128)
    assert nq <= decode.MAX_QUERIES
    out = torch.full_like(q, float("nan"))
    _, lse = portattn.attention(q, k, v, return_lse=True, out=out)
    ref, ref_lse = reference_attention(q, k, v)
    check(out, ref, dtype, lse, ref_lse)


def test_cuda_graph_replay_with_growing_lengths(gen):
    """One captured decode step replayed while the lengths grow on the device (the generation loop)."""
    dtype, b, cap, hq, hk, d = torch.bfloat16, 2, 512, 8, 2, 128
    q = rand(gen, dtype, b, 1, hq, d)
    k_cache, v_cache = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    k_new, v_new = rand(gen, dtype, b, 1, hk, d), rand(gen, dtype, b, 1, hk, d)
    seqlens = torch.tensor([10, 200], dtype=torch.int32, device="cuda")

    def step():
        return portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, k=k_new, v=v_new,
                                               num_splits=4)

    graph, static_out = capture_graph(step)
    for _ in range(3):
        seqlens += 1
        for t in (q, k_new, v_new):
            t.copy_(torch.randn(t.shape, device="cuda", generator=gen))
        graph.replay()
        torch.cuda.synchronize()
        lengths = (seqlens + 1).tolist()
        ref, _ = reference(q, k_cache, v_cache, lengths, causal=True)
        check(static_out, ref, dtype)


def test_split_calls_on_two_streams_and_in_a_graph(gen):
    """Eager calls with key splits keep their partial results in one buffer per stream (and thread), grown as calls
    need: calls of growing size queued without a sync on two streams in turn all match float64, and a captured call
    allocates its own partial results (no buffer of the capture stream) and stays right when replayed after eager
    calls that grew the buffers."""
    dtype, hq, hk, d = torch.float16, 8, 2, 64

    def call(b, n, splits):
        q, k, v = rand(gen, dtype, b, 1, hq, d), rand(gen, dtype, b, n, hk, d), rand(gen, dtype, b, n, hk, d)
        lengths = torch.full((b,), n, dtype=torch.int32, device="cuda")
        return (q, k, v, lengths), lambda: portattn.attention_with_kvcache(q, k, v, cache_seqlens=lengths,
                                                                           num_splits=splits)

    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    side.wait_stream(main)
    results = []
    for i, (b, n, splits) in enumerate([(1, 300, 3), (1, 300, 3), (2, 700, 5), (2, 700, 9), (4, 1500, 12)] * 2):
        with torch.cuda.stream(side if i % 2 else main):  # inputs made on the stream that reads them
            inputs, fn = call(b, n, splits)
            results.append((inputs, fn()))
    main.wait_stream(side)
    torch.cuda.synchronize()
    for (q, k, v, lengths), out in results:
        check(out, reference(q, k, v, lengths.tolist(), causal=True)[0], dtype)
    key = (torch.cuda.current_device(), main.cuda_stream, threading.get_ident())
    assert key in decode._workspaces

    (q, k, v, lengths), fn = call(2, 900, 7)
    capture_streams = []

    def step():
        capture_streams.append(torch.cuda.current_stream().cuda_stream)
        return fn()

    graph, static_out = capture_graph(step)
    capturing = (torch.cuda.current_device(), capture_streams[-1], threading.get_ident())
    assert capturing not in decode._workspaces
    for size in (2000, 4000):
        (q2, k2, v2, lengths2), bigger = call(4, size, 40)
        eager_out = bigger()
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, device="cuda", generator=gen))
        graph.replay()
        torch.cuda.synchronize()
        check(static_out, reference(q, k, v, lengths.tolist(), causal=True)[0], dtype)
        check(eager_out, reference(q2, k2, v2, lengths2.tolist(), causal=True)[0], dtype)


@pytest.mark.parametrize("paged_cache", [False, True], ids=["contiguous", "paged"])
def test_repeated_eager_calls_replay(gen, paged_cache):
    """Eager generation steps (one new key appended per step, lengths on the device): the second and later calls
    of the signature replay the first one's launches, and every step appends in place and matches float64 on the
    cache as it is after its append; a call that differs in an option takes the checked path."""
    from portattn.ops import eager, kvcache

    dtype, b, cap, hq, hk, d = torch.float16, 2, 256, 8, 2, 64
    k_full, v_full = rand(gen, dtype, b, cap, hk, d), rand(gen, dtype, b, cap, hk, d)
    k_cache, v_cache, table = k_full, v_full, None
    if paged_cache:
        k_cache, table = paged(k_full, 32, gen)
        v_cache = torch.full_like(k_cache, float("nan"))
        v_cache[table.flatten().long()] = v_full.view(-1, 32, hk, d)
    lengths = [40, 173]
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    for step in range(3):
        q, k_new, v_new = (rand(gen, dtype, b, 1, h, d) for h in (hq, hk, hk))
        key = kvcache._signature(q, k_cache, v_cache, seqlens, k_new, v_new, table, True, None, 0, False, None, 0.0,
                                 None, None, None)
        if step == 0:
            eager._replays.pop(key, None)  # an earlier test may have made this call
        assert key is not None and (eager.lookup(key) is not None) == (step > 0)
        out = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, k=k_new, v=v_new,
                                              block_table=table)
        for i, n in enumerate(lengths):
            k_full[i, n], v_full[i, n] = k_new[i, 0], v_new[i, 0]
        lengths = [n + 1 for n in lengths]
        check(out, reference(q, k_full, v_full, lengths, causal=True)[0], dtype)
        seqlens += 1
    got_k = k_cache[table.long()].flatten(1, 2) if paged_cache else k_cache
    assert torch.equal(got_k, k_full)
    plain = kvcache._signature(q, k_cache, v_cache, seqlens, None, None, table, True, None, 0, False, None, 0.0,
                               None, None, None)
    for scale, splits in ((0.5, 0), (None, 3)):
        key = kvcache._signature(q, k_cache, v_cache, seqlens, None, None, table, True, scale, splits, False, None,
                                 0.0, None, None, None)
        assert key != plain
        out = portattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table,
                                              scale=scale, num_splits=splits)
        check(out, reference(q, k_full, v_full, lengths, causal=True, scale=scale)[0], dtype)
