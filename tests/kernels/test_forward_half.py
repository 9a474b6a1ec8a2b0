"""float16 / bfloat16 attention (the matrix-unit kernel) against the float64 reference and SDPA's flash backend,
on every target the machine executes that has a 16-bit kernel."""
import contextvars
import threading

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import portattn
from portattn.flash_attn import flash_attn_func
from portattn.kernels.forward import WS_TILES_BY_LENGTH, has_kernel, select
from portattn.kernels.variant import dtype_name
from portattn.tools.reference import reference_attention, reference_masked, relative_error
from portattn.tools.testing import tweak_variant, use_kernel

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_half_target")]
DTYPES = [torch.float16, torch.bfloat16]
HEAD_DIMS = (32, 64, 96, 128, 256)
LSE_TOL = 1e-5  # the LSE is computed in float32 from exactly the same scores as the output


@pytest.fixture
def on_half_target(on_target):
    if not all(has_kernel(on_target, dtype) for dtype in DTYPES):
        pytest.skip(f"no 16-bit kernel for {on_target} yet")
    return on_target


def rand(gen, dtype, *shape):
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def sdpa_16bit(q, k, v, causal, scale=None):
    """SDPA's flash backend; its memory-efficient one where flash has no kernel (causal with Nq != Nk); grouped heads
    repeated where neither takes them."""
    def layouts():
        yield k, v
        if q.shape[1] != k.shape[1]:  # repeated only when the grouped call found no backend
            yield tuple(t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))

    for kv in layouts():
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            try:
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(
                        q, *kv, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != kv[0].shape[1])
            except RuntimeError:
                continue
    raise RuntimeError("no SDPA backend for this case")


def check(q, k, v, causal=False, scale=None, against_sdpa=True):
    """portattn's error vs float64 must be at most twice SDPA's (plus 1e-6 for exact cases), or without SDPA (calls it
    does not take) four times that of the float64 result rounded to the inputs' dtype; its LSE within 1e-5."""
    out = torch.full_like(q, float("nan"))
    _, lse = portattn.attention(q, k, v, causal=causal, scale=scale, return_lse=True, out=out)
    ref, ref_lse = reference_attention(q, k, v, causal, scale)
    err = relative_error(out, ref)
    assert err == err, "NaN in the output"
    assert relative_error(lse, ref_lse) <= LSE_TOL
    if against_sdpa:
        sdpa_err = relative_error(sdpa_16bit(q, k, v, causal, scale), ref)
        assert err <= 2 * sdpa_err + 1e-6, f"portattn {err:.3e} vs SDPA {sdpa_err:.3e}"
    else:
        rounding_err = relative_error(ref.to(q.dtype), ref)
        assert err <= 4 * rounding_err + 1e-6, f"portattn {err:.3e} vs the rounded result {rounding_err:.3e}"
    return err


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 17, 1000, 4097, 8192])
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_square(gen, dtype, d, n, causal):
    b, h = (2, 3) if n <= 1000 else (1, 2)
    check(*(rand(gen, dtype, b, h, n, d) for _ in range(3)), causal=causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq,nk", [(17, 1000), (1000, 17), (1, 128), (128, 4097), (4097, 130)])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_nq_ne_nk(gen, dtype, d, nq, nk, causal):
    q = rand(gen, dtype, 1, 2, nq, d)
    k, v = rand(gen, dtype, 1, 2, nk, d), rand(gen, dtype, 1, 2, nk, d)
    check(q, k, v, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq,nk", [(1300, 1300), (1300, 700), (700, 1300)])
@pytest.mark.parametrize("d", [64, 128])
def test_more_query_blocks_than_multiprocessors(gen, d, nq, nk, causal):
    # Several query blocks per SM (80 heads of 6-11 query blocks each, an odd count among them), grouped heads, and
    # causal masks with Nq != Nk that leave some query blocks few or no keys.
    q = rand(gen, torch.bfloat16, 2, 40, nq, d)
    k, v = (rand(gen, torch.bfloat16, 2, 8, nk, d) for _ in range(2))
    check(q, k, v, causal=causal)


def length_cases():
    """(head dim, causal, rows, Hopper's row) for each band of Hopper's length rows: a length inside the band (partial
    last blocks), for the causal setting it takes, or both."""
    cases = []
    for (dtype, d), bands in WS_TILES_BY_LENGTH["sm90"].items():
        for lengths, tile in bands if dtype == "bfloat16" else ():
            rows = lengths.first + 5 if lengths.first > 1 else lengths.last - 3
            cases += [pytest.param(d, causal, rows, tile, id=f"d{d}-{'causal' if causal else 'nomask'}-{rows}")
                      for causal in (False, True) if lengths.causal in (None, causal)]
    return cases


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d,causal,rows,tile", length_cases())
def test_length_rows_with_several_query_blocks_per_multiprocessor(gen, on_half_target, dtype, d, causal, rows, tile):
    # Each length row (Hopper: d = 64 short calls with four K/V stages and three Q buffers, 192-row blocks of three
    # computing warpgroups with two Q buffers or one; d = 96 and 128 160-key tiles; d = 256 32-key tiles, causal calls
    # 64-key tiles): partial last query and key blocks, Nq != Nk, grouped heads, and more query blocks than SMs. The
    # call's length is its query rows (its 2 * rows + 1 keys, half of them under a causal mask, are more).
    batch, heads = (2, 96) if rows <= 512 else (1, 16)
    q = rand(gen, dtype, batch, heads, rows, d)
    k, v = (rand(gen, dtype, batch, heads // 4, 2 * rows + 1, d) for _ in range(2))
    chosen = []
    with tweak_variant(lambda spec: chosen.append(spec) or spec):
        check(q, k, v, causal=causal)
    expected = select(on_half_target, dtype_name(dtype), d, seqlen=rows, causal=causal)
    assert chosen and all(s == expected for s in chosen)
    if on_half_target.family == "sm90":
        assert expected.tile == tile


@pytest.mark.parametrize("d,rows", [(64, 256), (96, 256), (128, 256), (256, 600)])
def test_last_key_tiles_seen_in_part(gen, on_half_target, d, rows):
    # Key tiles that a block's rows see only in part: causal calls whose diagonal falls at every 16 keys of a tile
    # (Nk - Nq from 1 to 113, bottom-right alignment), and calls without a mask whose last tile holds 1 to 128 keys.
    for extra in range(0, 128, 16):
        q = rand(gen, torch.bfloat16, 1, 8, rows, d)
        k, v = (rand(gen, torch.bfloat16, 1, 2, rows + extra + 1, d) for _ in range(2))
        check(q, k, v, causal=True, against_sdpa=False)
    for keys in (129, 150, 192, 193, 255, 256):
        q = rand(gen, torch.bfloat16, 1, 8, 200, d)
        k, v = (rand(gen, torch.bfloat16, 1, 2, keys, d) for _ in range(2))
        check(q, k, v, against_sdpa=False)


@pytest.mark.parametrize("d", [64, 128])
def test_query_blocks_without_keys_among_many(gen, d):
    """flash-attn's causal alignment (bottom-right) with more queries than keys: the first 2000 - 700 rows see no
    key and give zeros, whole query blocks among them, in a call of many more query blocks than the GPU holds."""
    nq, nk = 2000, 700
    q = rand(gen, torch.bfloat16, 1, nq, 40, d)
    k, v = (rand(gen, torch.bfloat16, 1, nk, 8, d) for _ in range(2))
    out = flash_attn_func(q, k, v, causal=True)
    ref, _ = reference_masked(*(t.transpose(1, 2).double() for t in (q, k, v)), causal=True, bottom_right=True)
    ref = ref.transpose(1, 2)
    assert torch.equal(out[:, :nq - nk], torch.zeros_like(out[:, :nq - nk]))
    assert relative_error(out[:, nq - nk:], ref[:, nq - nk:]) <= 1e-2


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_gqa_bshd_and_scale(gen, dtype, hq, hk):
    b, n, d = 2, 333, 128
    q = rand(gen, dtype, b, n, hq, d).transpose(1, 2)
    k, v = (rand(gen, dtype, b, n, hk, d).transpose(1, 2) for _ in range(2))
    check(q, k, v, causal=True)
    check(q, k, v, scale=0.3)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_strided_and_unaligned_inputs(gen, dtype, d):
    # Only the reference here: SDPA's flash kernel faulted (misaligned address) on the first of these views.
    q, k, v = (rand(gen, dtype, 2, 3, 100, d + 8)[..., :d] for _ in range(3))  # rows 16 B longer: read in place
    check(q, k, v, against_sdpa=False)
    q, k, v = (rand(gen, dtype, 2, 3, 100, d + 2)[..., :d] for _ in range(3))  # rows 4 B longer: copied
    check(q, k, v, against_sdpa=False)
    n = 2 * 3 * 50 * d
    q, k, v = (rand(gen, dtype, n + 1)[1:].view(2, 3, 50, d) for _ in range(3))  # base off 16 B: copied
    check(q, k, v, causal=True, against_sdpa=False)


@pytest.mark.parametrize("scale", [-0.3, 0.0])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_negative_and_zero_scale(gen, dtype, scale, d):
    q, k, v = (rand(gen, dtype, 2, 3, 200, d) for _ in range(3))
    for causal in (False, True):
        check(q, k, v, causal=causal, scale=scale, against_sdpa=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_output_view_with_odd_row_stride(gen, dtype):
    """The kernels store pairs of elements: an output whose rows are not aligned for that is written through a
    temporary, and nothing outside the view changes."""
    q, k, v = (rand(gen, dtype, 2, 3, 100, 64) for _ in range(3))
    buf = torch.full((2, 3, 100, 65), float("nan"), device="cuda", dtype=dtype)
    out = buf[..., 1:]
    portattn.attention(q, k, v, causal=True, out=out)
    assert relative_error(out, reference_attention(q, k, v, True)[0]) < 1e-2
    assert buf[..., 0].isnan().all()


@pytest.mark.parametrize("d", [64, 128])
def test_broadcast_key_value_views(gen, d):
    """Keys and values broadcast with ``expand`` (stride 0 along heads or batch), as code that widens one key/value
    head to every query head passes them: read in place, same answers."""
    q = rand(gen, torch.bfloat16, 2, 4, 1500, d)
    k, v = (rand(gen, torch.bfloat16, 2, 1, 1500, d).expand(2, 4, 1500, d) for _ in range(2))
    check(q, k, v, causal=True)
    k, v = (rand(gen, torch.bfloat16, 1, 4, 1500, d).expand(2, 4, 1500, d) for _ in range(2))
    check(q, k, v)


@pytest.mark.parametrize("d", [64, 128])
def test_repeated_signature_with_other_tensors(gen, d):
    """Calls of one signature on other tensors, the same ones again, a mix of both and from another thread: each
    call reads its own tensors (on Hopper the warp-specialized kernel's copy maps are re-pointed only where an
    address changed)."""
    sets = [[rand(gen, torch.bfloat16, 2, 2, 1100, d) for _ in range(3)] for _ in range(2)]
    (qa, ka, va), (qb, kb, vb) = sets
    for q, k, v in ((qa, ka, va), (qb, kb, vb), (qa, ka, va), (qa, kb, va), (qb, ka, vb)):
        check(q, k, v, causal=True)
    errors = []
    context = contextvars.copy_context()  # the test's target
    thread = threading.Thread(target=context.run, args=(lambda: errors.append(check(qb, kb, va, causal=True)),))
    thread.start()
    thread.join()
    assert len(errors) == 1, "the call in the other thread failed"
    check(qb, kb, va, causal=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_forced_matrix_unit_kernel(gen, d, causal):
    """With the matrix-unit kernel forced (PORTATTN_KERNEL=mma), it serves the calls the warp-specialized kernel takes
    on Hopper: GQA, Nq != Nk, ragged last tiles."""
    q = rand(gen, torch.bfloat16, 2, 4, 1500, d)
    k, v = (rand(gen, torch.bfloat16, 2, 2, 1500, d) for _ in range(2))
    q2 = rand(gen, torch.bfloat16, 1, 2, 1000, d)
    k2, v2 = (rand(gen, torch.bfloat16, 1, 2, 1300, d) for _ in range(2))
    with use_kernel("mma"):
        check(q, k, v, causal=causal)
        check(q2, k2, v2, causal=causal)
