"""Shared pieces of the hipify tests: the corpus of kernels with their expected verdicts, and NVRTC.

Each corpus file (``corpus/*.cu``) states its expected verdict in ``// expect:`` lines: ``translate``, or one line
per rewritten or refused construct, ``rewrite CHECK LINE:COL`` / ``refuse CHECK LINE:COL``. The ``case`` argument
of a test runs it once per corpus file. NVRTC gets CUDA's headers from its own bundled copy or a CUDA toolkit.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CORPUS = Path(__file__).resolve().parent / "corpus"
_EXPECT = re.compile(r"// expect: (translate|rewrite|refuse)(?: ([a-z0-9-]+) (\d+):(\d+))?\s*$")
NVRTC_ARCH = "sm_80"


@dataclass(frozen=True)
class Case:
    """One corpus kernel: its file, text, expected action and the (check, line, col) it expects."""

    path: Path
    text: str
    action: str
    expected: frozenset[tuple[str, int, int]]

    @property
    def name(self) -> str:
        return self.path.name


def read_case(path: Path) -> Case:
    text = path.read_text(encoding="utf-8")
    found = [m for m in map(_EXPECT.match, text.splitlines()) if m]
    actions = {m.group(1) for m in found}
    assert len(actions) == 1, f"{path.name}: expected exactly one kind of '// expect:' line, found {actions}"
    action = actions.pop()
    expected = frozenset((m.group(2), int(m.group(3)), int(m.group(4))) for m in found if m.group(2))
    assert (action == "translate") == (not expected), f"{path.name}: checks go with rewrite / refuse only"
    return Case(path, text, action, expected)


def corpus_cases() -> list[Case]:
    return [read_case(p) for p in sorted(CORPUS.glob("*.cu"))]


@pytest.fixture(scope="session")
def corpus() -> list[Case]:
    return corpus_cases()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``case``: every corpus kernel; ``translated_case``: those expected to translate (as they are or rewritten)."""
    for name, keep in (("case", lambda c: True), ("translated_case", lambda c: c.action != "refuse")):
        if name in metafunc.fixturenames:
            cases = [c for c in corpus_cases() if keep(c)]
            metafunc.parametrize(name, cases, ids=[c.name for c in cases])


# ---- NVRTC ----------------------------------------------------------------------------------------------------


def _toolkit_include() -> Path | None:
    """A CUDA toolkit's include folder holding cuda_fp16.h and math_constants.h, if one is installed."""
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    roots += sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True)
    for root in filter(None, roots):
        inc = Path(root) / "include"
        if (inc / "cuda_fp16.h").is_file() and (inc / "math_constants.h").is_file():
            return inc
    return None


@pytest.fixture(scope="session")
def nvrtc_include(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Include options that give NVRTC CUDA's headers: the copy NVRTC bundles (13.x), else a toolkit's."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python (NVRTC) is not installed")
    if hasattr(nvrtc, "nvrtcInstallBundledHeaders"):
        folder = tmp_path_factory.mktemp("nvrtc-headers")
        (err, *_) = nvrtc.nvrtcInstallBundledHeaders(str(folder).encode(), 0)
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and (folder / "cuda_fp16.h").is_file():
            return [f"-I{folder}", f"-I{folder / 'cccl'}"]
    toolkit = _toolkit_include()
    if toolkit is None:
        pytest.skip("no CUDA headers for NVRTC: NVRTC bundles none and no CUDA toolkit is installed")
    return [f"-I{toolkit}"]


@pytest.fixture(scope="session")
def nvrtc_compile(nvrtc_include: list[str]) -> Callable[[str, str], tuple[bool, str]]:
    """A function that compiles (name, text) with NVRTC for sm_80 and returns (success, log)."""
    return lambda name, text: _nvrtc_compile(name, text, nvrtc_include)


def _nvrtc_compile(name: str, text: str, include: list[str]) -> tuple[bool, str]:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    try:
        opts = [f"--gpu-architecture={NVRTC_ARCH}", "-std=c++17", *include]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        return status == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.rstrip(b"\0").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
