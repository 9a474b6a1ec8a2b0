"""The prelude's cross-lane operations against the lane semantics written down here, on every target the machine
executes (on NVIDIA: native 32-lane warps and the wave64 emulation)."""
import pytest
import torch

from portattn.kernels.probes import prelude_probe
from portattn.runtime import loader
from portattn.runtime.params import struct_from_header

pytestmark = pytest.mark.gpu
THREADS = 128


ProbeParams = struct_from_header("pa_prelude_probe.cu", "PaProbeParams")


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
    slots.append(lanes(lambda base, i: x[base]))  # pa_wave_uniform of the wave's first value

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
    spec = prelude_probe(target)
    assert spec.threads == THREADS
    fn = loader.kernel_function(spec, target, torch.cuda.current_device())
    params = ProbeParams(x_dev.data_ptr(), out.data_ptr(), got_ballots.data_ptr())
    loader.launch(target, fn, 1, THREADS, 0, params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    wrong = (out.cpu() != torch.tensor(slots)).nonzero()
    assert wrong.numel() == 0, f"cross-lane results differ from the lane semantics at (slot, thread) " \
                               f"{wrong[:8].tolist()}"
    bits = (1 << w) - 1
    got = [[int(b) & bits for b in col] for col in got_ballots.cpu().T.tolist()]
    assert got == ballots
