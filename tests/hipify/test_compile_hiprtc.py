"""Every corpus kernel that portattn-hipify translates compiles with hiprtc for gfx90a, and so does a kernel that
uses every CUDART_* constant of the math-constants rule.

Needs ROCm's hiprtc and hip-python (scripts/install-rocm-toolchain.sh); skipped without them unless
PORTATTN_REQUIRE_AMD=1, which turns the skip into a failure. The compiles go through portattn's hiprtc backend
(each in a worker process of its own), two at a time, once per module.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from hipify import TranslationError, translate
from hipify.math_constants import definitions
from portattn.errors import CompileError
from portattn.runtime import hiprtc
from portattn.runtime.sources import KernelSource

_REASON = hiprtc.toolchain_missing()
if _REASON and os.environ.get("PORTATTN_REQUIRE_AMD") == "1":
    raise RuntimeError(f"PORTATTN_REQUIRE_AMD=1 but {_REASON}")
pytestmark = [pytest.mark.amd, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]

ARCH = "gfx90a"
WORKERS = 2


def _compile(name: str, text: str) -> tuple[bool, str]:
    """(success, log) of one hiprtc build for gfx90a."""
    try:
        _, log = hiprtc.compile_source(KernelSource(name, text, ()), ARCH, hiprtc.options(ARCH, {}))
    except CompileError as exc:
        return False, str(exc)
    return True, log


def _constants_kernel() -> str:
    names = list(definitions())
    body = "\n".join(f"    out[{i}] = (double)({name});" for i, name in enumerate(names))
    source = f"#include <math_constants.h>\nextern \"C\" __global__ void all_constants(double* out) {{\n{body}\n}}\n"
    return translate(source, "checks/all_constants.cu", "all_constants.cu").text


@pytest.fixture(scope="module")
def built(corpus) -> dict[str, tuple[bool, str]]:
    """hiprtc's result for each translated corpus kernel, and for the constants kernel."""
    programs = {}
    for case in corpus:
        try:
            programs[case.name] = translate(case.text, f"corpus/{case.name}", case.name).text
        except TranslationError:
            assert case.action == "refuse", case.name
            continue
    programs["all_constants.cu"] = _constants_kernel()
    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(programs, pool.map(lambda item: _compile(*item), programs.items())))


def test_translation_compiles_with_hiprtc(translated_case, built) -> None:
    ok, log = built[translated_case.name]
    assert ok, f"the translation of {translated_case.name} does not compile with hiprtc for {ARCH}:\n{log}"


def test_every_math_constant_compiles_with_hiprtc(built) -> None:
    ok, log = built["all_constants.cu"]
    assert ok, log
