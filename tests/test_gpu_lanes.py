"""The prelude's cross-lane operations against the lane semantics written down here, on every target the machine
executes (on NVIDIA: native 32-lane warps and the wave64 emulation)."""
import ctypes

import pytest
import torch

from portattn.compile import compile_kernel
from portattn.driver import driver_for
from portattn.select import KernelSpec, TileConfig

pytestmark = pytest.mark.gpu
THREADS = 128


class ProbeParams(ctypes.Structure):  # src_cuda/pa_prelude_probe.cu: PaProbeParams
    _fields_ = [("x", ctypes.c_void_p), ("out", ctypes.c_void_p), ("ballots", ctypes.c_void_p)]


def probe_spec(lanes: int, emulated: bool) -> KernelSpec:
    return KernelSpec("pa_prelude_probe.cu", "pa_prelude_probe", "float32", 0, TileConfig(0, 0, THREADS), lanes,
                      emulated)


def widths(w: int) -> list[int]:
    return [1 << i for i in range(w.bit_length())]


def expected(x: list[float], w: int) -> tuple[list[list[float]], list[list[int]]]:
    """Slots and ballots as the prelude documents them, for waves of ``w`` lanes."""
    def lanes(fn):
        return [fn(t - t % w, t % w) for t in range(len(x))]

    def xor(mask, width):
        def one(base, i):
            j = i ^ mask
            return x[base + (i if j >= (i + width) & ~(width - 1) else j)]
        return lanes(one)

    def shfl(src_of, width):
        return lanes(lambda base, i: x[base + src_of(i) % width + (i & ~(width - 1))])

    def reduce(fn, width):
        return lanes(lambda base, i: fn(x[base + (i & ~(width - 1)) + j] for j in range(width)))

    slots = []
    for width in widths(w):
        slots += [xor(m, width) for m in range(w)]
        slots += [shfl(lambda i: 5, width), shfl(lambda i: 7 * i + 3, width), shfl(lambda i: i + 70, width)]
    for width in widths(w):
        slots += [reduce(max, width), reduce(sum, width)]

    def ballot(pred):
        return lanes(lambda base, i: sum(1 << j for j in range(w) if pred(base + j, j)))

    return slots, [ballot(lambda t, j: x[t] > 0), ballot(lambda t, j: j % 3 == 0)]


def test_cross_lane_operations_follow_lane_semantics(target):
    w = target.lanes
    gen = torch.Generator().manual_seed(int(torch.seed() % 2**31))
    # Small integers: every sum is exact, so results compare bit for bit.
    x = torch.randint(-50, 51, (THREADS,), generator=gen).float()
    slots, ballots = expected(x.tolist(), w)
    out = torch.full((len(slots), THREADS), float("nan"), device="cuda")
    mask_dtype = torch.int64 if w == 64 else torch.int32
    got_ballots = torch.zeros(THREADS, 2, dtype=mask_dtype, device="cuda")
    x_dev = x.cuda()
    spec = probe_spec(w, target.emulated)
    kernel = compile_kernel(spec, target)
    dev = torch.cuda.current_device()
    driver = driver_for(target.vendor)
    fn = driver.load(kernel.binary, dev).function(spec.function)
    params = ProbeParams(x_dev.data_ptr(), out.data_ptr(), got_ballots.data_ptr())
    driver.launch(fn, (1, 1, 1), (THREADS, 1, 1), 0, params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    wrong = (out.cpu() != torch.tensor(slots)).nonzero()
    assert wrong.numel() == 0, f"cross-lane results differ from the lane semantics at (slot, thread) {wrong[:8].tolist()}"
    bits = (1 << w) - 1
    got = [[int(b) & bits for b in col] for col in got_ballots.cpu().T.tolist()]
    assert got == ballots
