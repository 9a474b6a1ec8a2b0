"""The host mirrors of the parameter structs are generated from the CUDA headers; both compilers agree with their
layout (every member's offset and the size, compiled into static_asserts), and the reader refuses what it does not
know instead of guessing (no GPU needed)."""
import ctypes
import os

import pytest

from portattn.runtime.params import divisor, struct_fields, struct_from_header
from portattn.runtime.sources import KernelSource, read_header, read_source

# Every parameter struct a kernel takes: (header, struct).
STRUCTS = [
    ("pa_fwd_params.cuh", "PaFwdParams"),
    ("pa_prelude_probe.cu", "PaProbeParams"),
    ("pa_mfma_probe.cu", "PaMfmaProbeParams"),
]
WAVE64_ONLY = {"pa_mfma_probe.cu"}  # built for 64-lane waves only (on NVIDIA: the wave64 emulation)


def layout_check_source(header: str, name: str) -> str:
    """A translation unit that includes ``header`` and asserts the mirror's offsets and size."""
    mirror = struct_from_header(header, name)
    checks = [f"static_assert(offsetof({name}, {f}) == {getattr(mirror, f).offset}, \"{name}.{f}\");"
              for f, _ in mirror._fields_ if f != "_tail"]
    checks.append(f"static_assert(sizeof({name}) == {ctypes.sizeof(mirror)}, \"sizeof {name}\");")
    return (f'#include "{header}"\n#define offsetof(T, m) __builtin_offsetof(T, m)\n' + "\n".join(checks)
            + "\nextern \"C\" __global__ void pa_layout_check() {}\n")


@pytest.mark.parametrize("header, name", STRUCTS)
def test_mirror_has_every_member_in_order(header, name):
    mirror = struct_from_header(header, name)
    assert [f for f, _ in mirror._fields_ if f != "_tail"] == [m for m, _ in struct_fields(read_header(header), name)]
    assert len(mirror._fields_) >= 3


def _headers(vendor: str, main: str) -> tuple[tuple[str, str], ...]:
    """The vendor's headers, plus ``main`` when it is a kernel file (a probe's struct lives in its .cu file)."""
    source = read_source(vendor, main)
    return source.headers + (() if any(n == main for n, _ in source.headers) else ((main, source.text),))


@pytest.mark.parametrize("header, name", STRUCTS)
def test_nvrtc_agrees_with_the_mirror(header, name):
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed")
    from portattn.runtime import nvrtc

    source = KernelSource("pa_layout_check.cu", layout_check_source(header, name), _headers("cuda", header))
    lanes = {"PA_WARP_SIZE": 64, "PA_EMULATE_WAVE64": 1} if header in WAVE64_ONLY else {"PA_WARP_SIZE": 32}
    nvrtc.compile_source(source, "sm_80", nvrtc.options("sm_80", lanes))


@pytest.mark.amd
@pytest.mark.parametrize("header, name", STRUCTS)
def test_hiprtc_agrees_with_the_mirror(header, name):
    from portattn.runtime.hiprtc import toolchain_missing

    reason = toolchain_missing()
    if reason:
        if os.environ.get("PORTATTN_REQUIRE_AMD") == "1":
            raise RuntimeError(f"PORTATTN_REQUIRE_AMD=1 but {reason}")
        pytest.skip(reason)
    from portattn.runtime import hiprtc

    source = KernelSource("pa_layout_check.cu", layout_check_source(header, name), _headers("hip", header))
    hiprtc.compile_source(source, "gfx90a", hiprtc.options("gfx90a", {"PA_WARP_SIZE": 64}))


def test_tensor_maps_come_first():
    assert struct_fields("struct S { PaTensorMap m, n; int a; };", "S") == [
        ("m", "PaTensorMap"), ("n", "PaTensorMap"), ("a", "int")]


def test_a_moved_member_changes_the_mirror():
    text = "struct S {\n  const void* q;  // comment, with; punctuation\n  int a, b;\n  pa_i64 s;\n  float f;\n};"
    assert struct_fields(text, "S") == [("q", "pointer"), ("a", "int"), ("b", "int"), ("s", "pa_i64"), ("f", "float")]
    moved = text.replace("  int a, b;\n  pa_i64 s;", "  pa_i64 s;\n  int a, b;")
    assert [m for m, _ in struct_fields(moved, "S")] == ["q", "s", "a", "b", "f"]


@pytest.mark.parametrize("text, match", [
    ("struct S { double x; };", "member x has type double"),
    ("struct S { int x[4]; };", "cannot read the member name"),
    ("struct T { int x; };", "struct S not found"),
])
def test_unknown_members_are_refused(text, match):
    with pytest.raises(ValueError, match=match):
        struct_fields(text, "S")


def _device_div(v, x: int) -> int:
    """pa_div as the device computes it, in 32-bit unsigned arithmetic."""
    return ((((x * v.mul) >> 32) + x) & 0xFFFFFFFF) >> v.shift


def test_divisor_divides_exactly():
    import random

    rng = random.Random(0)
    for d in list(range(1, 2049)) + [rng.randrange(2049, 2**31) for _ in range(2000)] + [2**30, 2**31 - 1]:
        v = divisor(d)
        assert 0 <= v.mul < 2**32 and v.d == d
        xs = [0, 1, d - 1, d, d + 1, 2**31 - 1, 2**31 - 1 - (2**31 - 1) % d, 2**31 - 2 - (2**31 - 1) % d]
        xs += [rng.randrange(2**31) for _ in range(50)] + [rng.randrange(64 * d) for _ in range(50)]
        for x in xs:
            if 0 <= x < 2**31:
                assert _device_div(v, x) == x // d, (d, x)


@pytest.mark.parametrize("d", [0, -3, 2**31])
def test_divisor_refuses_what_it_cannot_divide_by(d):
    with pytest.raises(ValueError, match="divisor"):
        divisor(d)
