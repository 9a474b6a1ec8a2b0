"""The MFMA lane layouts of portattn/tools/fragments.py (no GPU needed): coverage, the per-lane structure the device
code relies on, agreement with the coordinate -> lane direction of AMD's calculator, spot values from its tables,
and every entry against AMD's published layouts (mfma_layouts.json, read by conftest.py without portattn's
formulas)."""
from __future__ import annotations

import pytest

from portattn.tools.fragments import INSTRUCTIONS, WAVE, MfmaLayout, layout

LAYOUTS = list(INSTRUCTIONS.values())
IDS = [lay.name for lay in LAYOUTS]


def test_the_six_gfx90a_instructions():
    assert {(lay.mnemonic, lay.m, lay.n, lay.k, lay.dtype) for lay in LAYOUTS} == {
        ("v_mfma_f32_32x32x8f16", 32, 32, 8, "float16"),
        ("v_mfma_f32_16x16x16f16", 16, 16, 16, "float16"),
        ("v_mfma_f32_32x32x8bf16_1k", 32, 32, 8, "bfloat16"),
        ("v_mfma_f32_16x16x16bf16_1k", 16, 16, 16, "bfloat16"),
        ("v_mfma_f32_32x32x2f32", 32, 32, 2, "float32"),
        ("v_mfma_f32_16x16x4f32", 16, 16, 4, "float32"),
    }
    for lay in LAYOUTS:
        assert lay.builtin == f"__builtin_amdgcn_mfma_f32_{lay.name}"
        assert layout(lay.mnemonic) is layout(lay.builtin) is layout(lay.name) is lay
    with pytest.raises(KeyError, match="unknown MFMA instruction"):
        layout("v_mfma_f32_4x4x4f16")


@pytest.mark.parametrize("lay", LAYOUTS, ids=IDS)
def test_fragment_sizes_match_the_builtins(lay: MfmaLayout):
    # A/B: 4 x 16-bit (halfx4 / shortx4) or 1 x fp32; C/D: floatx16 for 32x32, floatx4 for 16x16.
    assert lay.a_elems == lay.b_elems == (1 if lay.dtype == "float32" else 4)
    assert lay.c_elems == (16 if lay.m == 32 else 4)


@pytest.mark.parametrize("lay", LAYOUTS, ids=IDS)
def test_every_element_held_exactly_once(lay: MfmaLayout):
    tables = {
        "A": (lay.a_table(), {(r, k) for r in range(lay.m) for k in range(lay.k)}),
        "B": (lay.b_table(), {(k, c) for k in range(lay.k) for c in range(lay.n)}),
        "C": (lay.c_table(), {(r, c) for r in range(lay.m) for c in range(lay.n)}),
    }
    for what, (table, matrix) in tables.items():
        assert len(table) == WAVE, what
        held = [pos for lane in table for pos in lane]
        assert len(held) == len(set(held)), f"{lay.name} {what}: an element is held twice"
        assert set(held) == matrix, f"{lay.name} {what}: elements not held: {sorted(matrix - set(held))[:8]}"


@pytest.mark.parametrize("lay", LAYOUTS, ids=IDS)
def test_lane_structure(lay: MfmaLayout):
    for lane in range(WAVE):
        a, b, c = lay.a_table()[lane], lay.b_table()[lane], lay.c_table()[lane]
        # A: one row per lane, consecutive k; B: one column per lane, the same k as A (the lane's k slice).
        assert {r for r, _ in a} == {lane % lay.m}
        assert [k for _, k in a] == list(range(a[0][1], a[0][1] + lay.a_elems))
        assert {col for _, col in b} == {lane % lay.n}
        assert [k for k, _ in b] == [k for _, k in a]
        # C: one column per lane; rows in runs of 4 consecutive rows per 4 accumulator elements.
        assert {col for _, col in c} == {lane % lay.n}
        rows = [r for r, _ in c]
        for start in range(0, lay.c_elems, 4):
            assert rows[start:start + 4] == list(range(rows[start], rows[start] + 4))
    # Lanes 0..N-1 hold consecutive columns: a row of C is one register across N lanes.
    assert [lay.c(lane, 0) for lane in range(lay.n)] == [(0, col) for col in range(lay.n)]


@pytest.mark.parametrize("lay", LAYOUTS, ids=IDS)
def test_inverse_of_the_calculators_coordinate_mapping(lay: MfmaLayout):
    for lane in range(WAVE):
        for j in range(lay.a_elems):
            assert lay.a_location(*lay.a(lane, j)) == (lane, j)
        for j in range(lay.b_elems):
            assert lay.b_location(*lay.b(lane, j)) == (lane, j)
        for i in range(lay.c_elems):
            assert lay.c_location(*lay.c(lane, i)) == (lane, i)


def test_documented_formulas_and_calculator_spot_values():
    f16_32 = layout("32x32x8f16")
    for lane in range(WAVE):
        for j in range(4):
            assert f16_32.a(lane, j) == (lane % 32, 4 * (lane // 32) + j)
            assert f16_32.b(lane, j) == (4 * (lane // 32) + j, lane % 32)
        for i in range(16):
            assert f16_32.c(lane, i) == (8 * (i // 4) + 4 * (lane // 32) + i % 4, lane % 32)
    f16_16 = layout("16x16x16f16")
    for lane in range(WAVE):
        for j in range(4):
            assert f16_16.a(lane, j) == (lane % 16, 4 * (lane // 16) + j)
        for i in range(4):
            assert f16_16.c(lane, i) == (4 * (lane // 16) + i, lane % 16)
    assert [layout("32x32x2f32").a(lane, 0) for lane in (0, 31, 32, 63)] == [(0, 0), (31, 0), (0, 1), (31, 1)]
    assert [layout("16x16x4f32").b(lane, 0) for lane in (0, 15, 16, 63)] == [(0, 0), (0, 15), (1, 0), (3, 15)]
    # v_mfma_f32_16x16x16f16 register table: A[0][0..3] in lane 0 (v0 lo/hi, v1 lo/hi), A[0][4..7] in lane 16.
    assert [f16_16.a_location(0, k) for k in range(8)] == [(0, 0), (0, 1), (0, 2), (0, 3),
                                                           (16, 0), (16, 1), (16, 2), (16, 3)]
    # 32x32 accumulators: rows 0-3 in lanes 0-31 of registers 0-3, rows 4-7 in lanes 32-63, row 8 in register 4.
    assert f16_32.c_location(3, 5) == (5, 3)
    assert f16_32.c_location(4, 0) == (32, 0)
    assert f16_32.c_location(8, 0) == (0, 4)
    assert f16_32.c_location(31, 31) == (63, 15)


def test_out_of_range_is_refused():
    lay = layout("16x16x4f32")
    with pytest.raises(ValueError):
        lay.a(64, 0)
    with pytest.raises(ValueError):
        lay.b(0, 1)
    with pytest.raises(ValueError):
        lay.c(0, 4)


# ---- against AMD's published layouts (tests/kernels/mfma_layouts.json: the calculator's output, kept as data) ----

ARCHS = ("cdna2", "cdna3")


def test_published_table_covers_the_instructions(published_layouts):
    assert set(published_layouts) == set(INSTRUCTIONS)
    for name, archs in published_layouts.items():
        assert set(archs) == set(ARCHS), name
        assert archs["cdna2"]["mnemonic"] == layout(name).mnemonic


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("lay", LAYOUTS, ids=IDS)
def test_host_tables_match_the_published_layouts(lay: MfmaLayout, arch: str, published_layouts):
    published = published_layouts[lay.name][arch]
    for operand, ours in (("A", lay.a_table()), ("B", lay.b_table()), ("D", lay.c_table())):
        theirs = published[operand]
        assert len(theirs) == WAVE, f"{lay.name} {arch} {operand}: {len(theirs)} lanes"
        diff = [(lane, j, ours[lane][j], theirs[lane][j]) for lane in range(WAVE)
                for j in range(max(len(ours[lane]), len(theirs[lane])))
                if j >= len(ours[lane]) or j >= len(theirs[lane]) or ours[lane][j] != theirs[lane][j]]
        assert not diff, (f"{lay.name} ({arch}) {operand}: (lane, element, fragments.py, published) "
                          f"differ at {diff[:6]}")
