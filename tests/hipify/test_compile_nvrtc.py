"""Every corpus kernel compiles with NVRTC for sm_80 as it is (so the corpus is real CUDA), and the CUDART_*
constants that the math-constants rule defines for HIP have the values of CUDA's own <math_constants.h>."""
from __future__ import annotations

import re
from pathlib import Path

from hipify.math_constants import definitions

_BITS = re.compile(r"__(?:int_as_float|longlong_as_double)\((0x[0-9a-fA-F]+)[uUlL]*\)")


def test_original_compiles_with_nvrtc(case, nvrtc_compile) -> None:
    ok, log = nvrtc_compile(case.name, case.text)
    assert ok, f"{case.name} does not compile with NVRTC:\n{log}"


def test_math_constants_match_cuda(nvrtc_include, nvrtc_compile) -> None:
    """Each literal constant equals CUDA's (static_assert under NVRTC); each bit pattern is CUDA's pattern."""
    folders = [Path(opt[2:]) for opt in nvrtc_include]
    header = next(d / "math_constants.h" for d in folders if (d / "math_constants.h").is_file())
    cuda = dict(re.findall(r"^#define\s+(CUDART_\w+)\s+(.+?)\s*$", header.read_text(), re.M))
    ours = definitions()
    assert set(ours) == set(cuda)
    asserts = []
    for name, value in ours.items():
        bits = _BITS.fullmatch(value)
        if bits:
            theirs = _BITS.fullmatch(cuda[name])
            assert theirs is not None and int(bits.group(1), 16) == int(theirs.group(1), 16), name
        else:
            asserts.append(f'static_assert({name} == ({value}), "{name}");')
    assert len(asserts) > 80
    ok, log = nvrtc_compile("math_constants_check.cu", "#include <math_constants.h>\n" + "\n".join(asserts) + "\n")
    assert ok, log
