"""The MFMA functions of src_cuda/pa_mfma.cuh on a 64-lane target (the wave64 emulation on NVIDIA, a CDNA GPU
natively), through the probe kernels of src_cuda/pa_mfma_probe.cu.

For every instruction, each wave multiplies its own random matrices, chaining the accumulator through a second
instruction (D1 = A0 B0 + C, D2 = A1 B1 + D1). The products are compared with float64 matrix products, and each
lane's raw fragments (A0, B0 and D1 as the lane holds them) with the lane layouts of portattn/fragments.py and with
AMD's published layouts (tests/kernels/mfma_layouts.json, read without any of portattn's formulas): the kernel loads
and stores by the device layout functions, so this ties the device layouts to both tables (and, on AMD hardware,
to the instruction itself).
"""
from __future__ import annotations

import pytest
import torch

from portattn.kernels.probes import mfma_probe
from portattn.runtime import loader
from portattn.runtime.params import struct_from_header
from portattn.runtime.target import available_targets
from portattn.tools.fragments import INSTRUCTIONS, WAVE, MfmaLayout

pytestmark = pytest.mark.gpu
THREADS = 256  # 4 waves per block: separate scratch rows and named barriers per wave
BLOCKS = 3
WAVES = BLOCKS * THREADS // WAVE
U = 2.0**-24  # unit roundoff of fp32
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
LAYOUTS = list(INSTRUCTIONS.values())


ProbeParams = struct_from_header("pa_mfma_probe.cu", "PaMfmaProbeParams")


@pytest.fixture(scope="module")
def wave64():
    """The target that executes 64-lane waves here (emulated on NVIDIA, native on AMD)."""
    targets = [t for t in available_targets() if t.lanes == WAVE]
    if not targets:
        pytest.skip("no 64-lane target on this machine")
    return targets[0]


def make_inputs(layout: MfmaLayout, exact: bool, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A [W, 2, M, K], B [W, 2, K, N] in the instruction's input type and C [W, M, N] float32, on the CPU.

    exact: multiples of 1/8 in [-2, 2] (C: in [-8, 8]), so that every partial sum is exact in fp32 and any
    summation order gives the float64 result. Otherwise normal values away from the fp16 subnormals."""
    m, n, k = layout.m, layout.n, layout.k
    dtype = TORCH_DTYPES[layout.dtype]

    def values(*shape: int, scale: int) -> torch.Tensor:
        if exact:
            return torch.randint(-16 * scale, 16 * scale + 1, shape, generator=gen).double() / 8
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
        return torch.where(x.abs() < 2**-8, torch.full_like(x, 2**-8), x)

    return {
        "a": values(WAVES, 2, m, k, scale=1).to(dtype),
        "b": values(WAVES, 2, k, n, scale=1).to(dtype),
        "c": values(WAVES, m, n, scale=4).float(),
    }


def device_operand(x: torch.Tensor) -> torch.Tensor:
    """The bits the kernel reads: bf16 travels as raw 16-bit words."""
    return (x.view(torch.int16) if x.dtype == torch.bfloat16 else x).contiguous().cuda()


def run_probe(layout: MfmaLayout, target, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    spec = mfma_probe(target, layout.name)
    assert spec.threads == THREADS
    fn = loader.kernel_function(spec, target, torch.cuda.current_device())
    a, b, c = (device_operand(inputs[name]) for name in ("a", "b", "c"))
    shape = (WAVES, layout.m, layout.n)
    d1 = torch.full(shape, float("nan"), device="cuda")
    d2 = torch.full(shape, float("nan"), device="cuda")
    frags = torch.full((WAVES * WAVE, layout.a_elems + layout.b_elems + layout.c_elems), float("nan"), device="cuda")
    params = ProbeParams(a.data_ptr(), b.data_ptr(), c.data_ptr(), d1.data_ptr(), d2.data_ptr(), frags.data_ptr())
    loader.launch(target, fn, BLOCKS, THREADS, 0, params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return {"d1": d1.cpu(), "d2": d2.cpu(), "frags": frags.cpu()}


def gather(x: torch.Tensor, table: list[list[tuple[int, int]]]) -> torch.Tensor:
    """Per-lane fragments of the per-wave matrices x [W, R, C] by a layout table [lane][element] -> (r, c):
    [W * 64, elements], thread-major like the kernel's frags."""
    idx = torch.tensor(table)
    return x[:, idx[..., 0], idx[..., 1]].reshape(x.shape[0] * WAVE, -1)


def accumulation_bound(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, k: int) -> torch.Tensor:
    """Elementwise error bound of a K-term fp32 accumulation of A B onto C (float64 inputs)."""
    return (k + 2) * 2 * U * (a.abs() @ b.abs() + c.abs()) + 1e-30


# The architecture whose published table applies: the emulation executes the gfx90a (CDNA2) mapping.
PUBLISHED_ARCH = {"cdna2": "cdna2", "cdna3": "cdna3"}


def published_tables(published_layouts: dict, layout: MfmaLayout, target) -> dict[str, list]:
    """AMD's published A, B and D layouts of ``layout`` for the family ``target`` executes."""
    family = target.family
    assert family in PUBLISHED_ARCH, (f"mfma_layouts.json has no published layout for {family} ({target}): add the "
                                      "calculator's output for it")
    return published_layouts[layout.name][PUBLISHED_ARCH[family]]


def check(layout: MfmaLayout, inputs: dict[str, torch.Tensor], got: dict[str, torch.Tensor], exact: bool,
          published: dict[str, list]) -> None:
    a, b, c = (inputs[name].double() for name in ("a", "b", "c"))
    d1, d2 = got["d1"].double(), got["d2"].double()
    ref1 = a[:, 0] @ b[:, 0] + c
    ref2 = a[:, 1] @ b[:, 1] + d1  # the second instruction accumulates onto what the first produced
    tol1 = 0 if exact else accumulation_bound(a[:, 0], b[:, 0], c, layout.k)
    tol2 = 0 if exact else accumulation_bound(a[:, 1], b[:, 1], d1, layout.k)
    for what, val, ref, tol in (("D1", d1, ref1, tol1), ("D2", d2, ref2, tol2)):
        assert not val.isnan().any(), f"{layout.name}: {what} has unwritten (NaN) elements"
        bad = ((val - ref).abs() > tol).nonzero()
        assert bad.numel() == 0, (
            f"{layout.name}: {what} differs from the float64 product at (wave, row, col) {bad[:8].tolist()}: "
            f"got {val[tuple(bad[0])].item()!r}, expected {ref[tuple(bad[0])].item()!r}")

    # Raw fragments: what each lane holds, against the host's layout tables.
    frags = got["frags"].double()
    na, nb = layout.a_elems, layout.b_elems
    expected = {
        "A": (frags[:, :na], gather(a[:, 0], layout.a_table())),
        "B": (frags[:, na:na + nb], gather(b[:, 0], layout.b_table())),
        "D1": (frags[:, na + nb:], gather(d1, layout.c_table())),
    }
    independent = {
        "A": gather(a[:, 0], published["A"]),
        "B": gather(b[:, 0], published["B"]),
        "D1": gather(d1, published["D"]),
    }
    for what, (val, ref) in expected.items():
        bad = (val != ref).nonzero()
        assert bad.numel() == 0, (
            f"{layout.name}: lane fragments of {what} differ from portattn.fragments at (thread, element) "
            f"{bad[:8].tolist()}")
        bad = (val != independent[what]).nonzero()
        assert bad.numel() == 0, (
            f"{layout.name}: lane fragments of {what} differ from AMD's published layout at (thread, element) "
            f"{bad[:8].tolist()}")


@pytest.mark.parametrize("exact", [True, False], ids=["exact-values", "random-values"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=[lay.name for lay in LAYOUTS])
def test_mfma_matches_float64_product_and_lane_layout(layout, exact, wave64, published_layouts):
    seed = int(torch.seed() % 2**31)
    print(f"seed={seed}")
    gen = torch.Generator().manual_seed(seed)
    inputs = make_inputs(layout, exact, gen)
    got = run_probe(layout, wave64, inputs)
    check(layout, inputs, got, exact, published_tables(published_layouts, layout, wave64))
