"""Lane layouts of the AMD CDNA2 (gfx90a) MFMA instructions that ``src_cuda/pa_mfma.cuh`` provides, as host data.

For each instruction on a 64-lane wave: which matrix element each lane holds in each element of its A, B and C/D
fragments. The device header computes the same maps (``pa_mfma_layout<M, N, K>``); the tests compare the two and
use these maps to build expected fragment contents.

Source checked: AMD's matrix instruction calculator (github.com/ROCm/amd_matrix_instruction_calculator,
``matrix_calculator.py``): its cdna2 table (M, N, K, one block for all six instructions) and the gfx9 mapping from
a matrix coordinate to (register, lane), written out here as :meth:`MfmaLayout.a_location` and
:meth:`MfmaLayout.c_location`; the lane -> coordinate maps (:meth:`MfmaLayout.a`, ...) are their inverses, stated
the way the device code uses them.
"""
from __future__ import annotations

from dataclasses import dataclass

WAVE = 64  # MFMA operates on 64-lane waves
MULTIROW = 4  # C/D: consecutive accumulator registers hold 4 consecutive rows


@dataclass(frozen=True)
class MfmaLayout:
    """One single-block MFMA instruction ``D (m x n, f32) = A (m x k) * B (k x n) + C``."""

    name: str  # instruction suffix as in pa_mfma.cuh: pa_mfma_f32_<name>
    m: int
    n: int
    k: int
    dtype: str  # input element type: "float16", "bfloat16" or "float32"

    @property
    def mnemonic(self) -> str:
        """The gfx90a assembly mnemonic."""
        return f"v_mfma_f32_{self.name}"

    @property
    def builtin(self) -> str:
        return f"__builtin_amdgcn_mfma_f32_{self.name}"

    @property
    def a_elems(self) -> int:
        """A elements per lane (= B elements per lane)."""
        return self.m * self.k // WAVE

    @property
    def b_elems(self) -> int:
        return self.n * self.k // WAVE

    @property
    def c_elems(self) -> int:
        """C/D elements (fp32 registers) per lane."""
        return self.m * self.n // WAVE

    # ---- lane, element -> matrix coordinate (what each lane holds) ----

    def a(self, lane: int, j: int) -> tuple[int, int]:
        """(row, k) of A held by ``lane`` in fragment element ``j``."""
        _check(lane, j, self.a_elems)
        return lane % self.m, self.a_elems * (lane // self.m) + j

    def b(self, lane: int, j: int) -> tuple[int, int]:
        """(k, col) of B held by ``lane`` in fragment element ``j``."""
        _check(lane, j, self.b_elems)
        return self.b_elems * (lane // self.n) + j, lane % self.n

    def c(self, lane: int, i: int) -> tuple[int, int]:
        """(row, col) of C/D held by ``lane`` in accumulator element ``i``."""
        _check(lane, i, self.c_elems)
        groups = WAVE // self.n
        return groups * MULTIROW * (i // MULTIROW) + MULTIROW * (lane // self.n) + i % MULTIROW, lane % self.n

    # ---- matrix coordinate -> lane, element (the calculator's direction) ----

    def a_location(self, row: int, k: int) -> tuple[int, int]:
        """(lane, element) holding A[row][k]: lane M * (k // per_lane) + row, element k % per_lane."""
        per_lane = self.a_elems
        return self.m * (k // per_lane) + row, k % per_lane

    def b_location(self, k: int, col: int) -> tuple[int, int]:
        per_lane = self.b_elems
        return self.n * (k // per_lane) + col, k % per_lane

    def c_location(self, row: int, col: int) -> tuple[int, int]:
        """(lane, element) holding C[row][col]: 4-row by N-column tiles fill a register's lanes in order of row,
        then continue 4 registers further."""
        tiles_per_register = WAVE // self.n
        lane = self.n * ((row // MULTIROW) % tiles_per_register) + col
        element = MULTIROW * (row // (MULTIROW * tiles_per_register)) + row % MULTIROW
        return lane, element

    # ---- whole tables ----

    def a_table(self) -> list[list[tuple[int, int]]]:
        """[lane][j] -> (row, k)."""
        return [[self.a(lane, j) for j in range(self.a_elems)] for lane in range(WAVE)]

    def b_table(self) -> list[list[tuple[int, int]]]:
        """[lane][j] -> (k, col)."""
        return [[self.b(lane, j) for j in range(self.b_elems)] for lane in range(WAVE)]

    def c_table(self) -> list[list[tuple[int, int]]]:
        """[lane][i] -> (row, col)."""
        return [[self.c(lane, i) for i in range(self.c_elems)] for lane in range(WAVE)]


def _check(lane: int, element: int, count: int) -> None:
    if not 0 <= lane < WAVE:
        raise ValueError(f"lane {lane} outside 0..{WAVE - 1}")
    if not 0 <= element < count:
        raise ValueError(f"fragment element {element} outside 0..{count - 1}")


INSTRUCTIONS: dict[str, MfmaLayout] = {
    layout.name: layout
    for layout in (
        MfmaLayout("32x32x8f16", 32, 32, 8, "float16"),
        MfmaLayout("16x16x16f16", 16, 16, 16, "float16"),
        MfmaLayout("32x32x8bf16_1k", 32, 32, 8, "bfloat16"),
        MfmaLayout("16x16x16bf16_1k", 16, 16, 16, "bfloat16"),
        MfmaLayout("32x32x2f32", 32, 32, 2, "float32"),
        MfmaLayout("16x16x4f32", 16, 16, 4, "float32"),
    )
}


def layout(name: str) -> MfmaLayout:
    """The layout of instruction ``name`` (``"32x32x8f16"`` or ``"v_mfma_f32_32x32x8f16"``)."""
    key = name.removeprefix("v_mfma_f32_").removeprefix("__builtin_amdgcn_mfma_f32_")
    try:
        return INSTRUCTIONS[key]
    except KeyError:
        raise KeyError(f"unknown MFMA instruction {name!r}; known: {', '.join(INSTRUCTIONS)}") from None


__all__ = ["INSTRUCTIONS", "WAVE", "MfmaLayout", "layout"]
