"""Every corpus kernel that portattn-hipify translates compiles with hiprtc for gfx90a, and so does a kernel that
uses every CUDART_* constant of the math-constants rule.

Needs ROCm's hiprtc and hip-python (scripts/install-rocm-toolchain.sh); skipped without them unless
PORTATTN_REQUIRE_AMD=1, which turns the skip into a failure. The compiles run in portattn's hiprtc worker
processes, two at a time, once per session.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from hipify import TranslationError, translate
from hipify.math_constants import definitions

try:
    from portattn.runtime import hiprtc  # the package laid out by layer
except ImportError:
    from portattn.compile import hiprtc  # the layout before it

_REASON = hiprtc.toolchain_missing()
if _REASON and os.environ.get("PORTATTN_REQUIRE_AMD") == "1":
    raise RuntimeError(f"PORTATTN_REQUIRE_AMD=1 but {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

ARCH = "gfx90a"
WORKERS = 2


def _compile(name: str, text: str) -> tuple[bool, str]:
    request = {"op": "compile", "name": name, "text": text, "headers": [], "options": hiprtc.options(ARCH, {}),
               "arch": ARCH}
    reply, code, stderr = hiprtc.run_worker(request)
    if reply is None:
        return False, f"the hiprtc worker exited with status {code}:\n{stderr[-4000:]}"
    return reply.get("status") == "ok", reply.get("log") or reply.get("message", "")


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
