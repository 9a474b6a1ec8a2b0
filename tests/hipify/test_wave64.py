"""The wave64 verdicts on small pieces of CUDA (user mode): each refusal and rewrite by check id and line:col, and
the constructs that are portable as they are."""
from __future__ import annotations

import pytest

from hipify import TranslationError, translate_body
from hipify.translate import translate_source

FULL = "0xffffffff"


def verdicts(src: str) -> set[tuple[str, int, int]]:
    """Refusals (or, when there are none, rewrites) as (check, line, col)."""
    try:
        result = translate_source(src, "k.cu", prelude=False)
    except TranslationError as exc:
        return {(d.check, d.line, d.col) for d in exc.diagnostics}
    return {(d.check, d.line, d.col) for d in result.rewrites}


REFUSED = [
    pytest.param(  # the tree is broadcast from lane 0 of the whole (64-lane) wave
        "__global__ void k(float* o, float v) {\n"
        "    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "    v = __shfl_sync(0xffffffff, v, 0);\n"
        "    o[threadIdx.x] = v;\n}\n",
        {("wave32-tree-broadcast", 3, 9)}, id="broadcast"),
    pytest.param(  # unrolled tree; lane 0 of a wave-numbered lane
        "__global__ void k(float* o, float v) {\n"
        "    v += __shfl_xor_sync(0xffffffff, v, 16);\n"
        "    v += __shfl_xor_sync(0xffffffff, v, 8);\n"
        "    if ((threadIdx.x & (warpSize - 1)) == 0) *o = v;\n}\n",
        {("wave32-tree-broadcast", 4, 10)}, id="unrolled-lane0"),
    pytest.param(  # the tree sits in a helper; the caller reads lane 0 of the wave
        "__device__ float red(float v) {\n"
        "    for (int d = 1; d < 32; d *= 2) v += __shfl_xor_sync(0xffffffff, v, d);\n"
        "    return v;\n}\n"
        "__global__ void k(float* o, float x) {\n"
        "    const int lane = threadIdx.x % warpSize;\n"
        "    const float s = red(x);\n"
        "    if (lane == 0) atomicAdd(o, s);\n}\n",
        {("wave32-tree-broadcast", 8, 9)}, id="helper-doubling"),
    pytest.param(  # the lanes other than 0 leave early
        "__global__ void k(float* o, float v) {\n"
        "    const int lane = threadIdx.x % warpSize;\n"
        "    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "    if (lane != 0) return;\n"
        "    *o = v;\n}\n",
        {("wave32-tree-broadcast", 4, 9)}, id="early-exit"),
    pytest.param(  # a lane number of unknown origin
        "__device__ void put(float* o, float v, int lane) {\n"
        "    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "    if (lane == 0) *o = v;\n}\n",
        {("wave32-tree-broadcast", 3, 9)}, id="unknown-lane"),
    pytest.param(  # a ternary read
        "__global__ void k(float* o, float v) {\n"
        "    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "    o[blockIdx.x] = threadIdx.x == 0 ? v : 0.f;\n}\n",
        {("wave32-tree-broadcast", 3, 21)}, id="ternary"),
    pytest.param(  # a tree that says width 32, read at lane 0 of the wave
        "__global__ void k(float* o, float v) {\n"
        "    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d, 32);\n"
        "    if (threadIdx.x % warpSize == 0) atomicAdd(o, v);\n}\n",
        {("wave32-tree-broadcast", 3, 9)}, id="width32-tree-read-at-wave-lane0"),
    pytest.param(  # the second half of the first wave idles while the wave shuffles
        "__global__ void k(float* o, const float* s) {\n"
        "    if (threadIdx.x < 32) {\n"
        "        float v = s[threadIdx.x];\n"
        "        for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "        if (threadIdx.x == 0) *o = v;\n    }\n}\n",
        {("lane-constant-mixed", 2, 23)}, id="first-warp-guard"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    float t = __shfl_sync(0xffffffff, v, 31);\n"
        "    *o = t;\n}\n",
        {("wave32-last-lane", 2, 15)}, id="lane31"),
    pytest.param(  # 32-lane numbering through a macro, next to warpSize
        "#define WARP 32\n"
        "__global__ void k(float* o, float v) {\n"
        "    const int warp = threadIdx.x / WARP;\n"
        "    for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffff, v, d);\n"
        "    o[warp] = v;\n}\n",
        {("lane-constant-mixed", 3, 36)}, id="mixed-macro"),
    pytest.param(  # every wave sums t[0..31] twice: a 32-lane numbering flows into a whole-wave tree
        "__global__ void k(float* o, const float* t) {\n"
        "    float v = t[threadIdx.x % 32];\n"
        "    for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffff, v, d);\n"
        "    o[threadIdx.x] = v;\n}\n",
        {("lane-constant-mixed", 2, 31)}, id="numbered-load-into-wave-tree"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    const int warps = blockDim.x / 32;\n"
        "    v += __shfl_down_sync(0xffffffff, v, warpSize / 2);\n"
        "    o[warps] = v;\n}\n",
        {("lane-constant-mixed", 2, 36)}, id="mixed-warp-count"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    const int lane = threadIdx.x % warpSize;\n"
        "    o[lane] = __shfl_sync(0xffffffff, v, (lane + 3) & 31);\n}\n",
        {("shfl-lane-mod32", 3, 55)}, id="src-and31"),
    pytest.param(
        "__global__ void k(unsigned long long* o, bool p) {\n"
        "    const int lane = threadIdx.x & 31;\n"
        "    unsigned long long b = __ballot_sync(0xffffffff, p);\n"
        "    o[lane] = b;\n}\n",
        {("vote-in-32-lane-groups", 3, 28)}, id="ballot-in-32-groups"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    const int lane = threadIdx.x % 32;\n"
        "    o[lane] = __shfl_sync(0xffffffff, v, lane + 1);\n}\n",
        {("shfl-src-range", 3, 15)}, id="src-range"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    o[threadIdx.x] = __shfl_down_sync(0xffffffff, v, 32);\n}\n",
        {("shfl-offset-range", 2, 54)}, id="offset-32"),
    pytest.param(
        "__global__ void k(unsigned* o, bool p) {\n"
        "    unsigned b;\n"
        "    b = __ballot_sync(0xffffffff, p);\n"
        "    *o = b;\n}\n",
        {("ballot-32bit-store", 3, 9)}, id="store-by-assignment"),
    pytest.param(
        "__device__ unsigned int votes(bool p) { return __ballot_sync(0xffffffff, p); }\n",
        {("ballot-32bit-store", 1, 48)}, id="store-by-return"),
    pytest.param(
        "__global__ void k(unsigned* o, bool p) { *o = (unsigned)__ballot_sync(0xffffffff, p); }\n",
        {("ballot-32bit-store", 1, 47)}, id="store-by-cast"),
    pytest.param(
        "typedef unsigned int u32;\n__global__ void k(u32* o) { u32 m = __activemask(); *o = m; }\n",
        {("ballot-32bit-store", 2, 37)}, id="store-through-typedef"),
    pytest.param(
        "__global__ void k(int* o) { *o = __ffs(__activemask()) - 1; }\n",
        {("ballot-32bit-op", 1, 34)}, id="ffs"),
    pytest.param(
        "#define FULL_MASK 0xffffffffu\n"
        "__global__ void k(int* o, bool p) { if (__ballot_sync(FULL_MASK, p) == FULL_MASK) *o = 1; }\n",
        {("ballot-32bit-op", 2, 72)}, id="full-mask-macro"),
    pytest.param(
        "__global__ void k(int* o, bool p) {\n"
        "    const int lane = threadIdx.x % warpSize;\n"
        "    const auto b = __ballot_sync(0xffffffff, p);\n"
        "    *o = __popcll(b & ((1 << lane) - 1));\n}\n",
        {("lanemask-32bit-shift", 4, 25)}, id="int-shift"),
    pytest.param(
        "__global__ void k(unsigned* o) { *o = 1u << (threadIdx.x % warpSize); }\n",
        {("lanemask-32bit-shift", 1, 39)}, id="shift-of-wave-lane"),
    pytest.param(  # cannot tell what `bit` is, but the mask meets a 64-lane ballot
        "__global__ void k(int* o, bool p, int bit) { *o = __popcll(__ballot_sync(0xffffffff, p) & (1u << bit)); }\n",
        {("lanemask-32bit-shift", 1, 92)}, id="shift-next-to-ballot"),
    pytest.param(
        "#include <cuda_fp16.h>\n"
        "__global__ void k(__half* o) { __half h = o[threadIdx.x]; o[0] = __shfl_down_sync(0xffffffff, h, 1); }\n",
        {("shfl-half", 2, 66)}, id="half"),
    pytest.param(
        "__global__ void k(float* o) { __shared__ float s[warpSize]; s[0] = 1.f; o[0] = s[0]; }\n",
        {("warpsize-constant", 1, 50)}, id="warpsize-array-size"),
    pytest.param(
        '__global__ void k(float* o) { asm volatile("trap;"); }\n',
        {("inline-asm", 1, 31)}, id="asm"),
]


@pytest.mark.parametrize("src, expected", REFUSED)
def test_refused(src: str, expected: set) -> None:
    with pytest.raises(TranslationError) as info:
        translate_source(src, "k.cu", prelude=False)
    assert {(d.check, d.line, d.col) for d in info.value.diagnostics} == expected
    assert all(d.hint and d.message for d in info.value.diagnostics)


REWRITTEN = [
    pytest.param(  # the helper's tree gets the width its caller's numbering implies
        "__device__ float red(float v) {\n"
        "    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "    return v;\n}\n"
        "__global__ void k(float* o, float x) {\n"
        "    const int lane = threadIdx.x % 32;\n"
        "    const float s = red(x);\n"
        "    if (lane == 0) o[threadIdx.x / 32] = s;\n}\n",
        {("add-width-32", 2, 42)},
        "v += __shfl_down(v, d, 32);", id="helper"),
    pytest.param(  # a function-like macro is read as a function
        "#define REDUCE(v) for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffff, v, d)\n"
        "__global__ void k(float* o, float v) {\n"
        "    REDUCE(v);\n"
        "    if ((threadIdx.x & 31) == 0) o[threadIdx.x >> 5] = v;\n}\n",
        {("add-width-32", 1, 57)},
        "v += __shfl_down(v, d, 32)\n", id="macro"),
    pytest.param(
        "__device__ unsigned lane_id() { return threadIdx.x & 31; }\n"
        "__global__ void k(int* o, int v) { o[threadIdx.x] = __shfl_sync(0xffffffff, v, lane_id() ^ 1); }\n",
        {("add-width-32", 2, 53)},
        "__shfl(v, lane_id() ^ 1, 32)", id="lane-helper"),
]


@pytest.mark.parametrize("src, expected, fragment", REWRITTEN)
def test_rewritten(src: str, expected: set, fragment: str) -> None:
    result = translate_source(src, "k.cu", prelude=False)
    assert {(d.check, d.line, d.col) for d in result.rewrites} == expected
    assert fragment in result.text
    assert translate_body(result.text, "k.cu", prelude=False) == result.text


PORTABLE = [
    pytest.param(  # thread 0 reads the value before it goes through the helper's tree
        "__device__ float red(float v) {\n"
        "    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffff, v, d);\n"
        "    return v;\n}\n"
        "__global__ void k(float* o, float x) {\n"
        "    float s = x;\n"
        "    if (threadIdx.x == 0) o[0] = s;\n"
        "    s = red(s);\n"
        "    o[1 + blockIdx.x * blockDim.x + threadIdx.x] = s;\n}\n", id="use-before-the-tree"),
    pytest.param(  # a count compared with 0 is not a lane number
        "__global__ void k(float* o, float v, const int* counts) {\n"
        "    const int n = counts[blockIdx.x];\n"
        "    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffff, v, d);\n"
        "    if (n == 0) o[blockIdx.x * blockDim.x + threadIdx.x] = v;\n}\n",
        id="count-is-not-a-lane"),
    pytest.param("__global__ void k(float* o, float v) { o[threadIdx.x] = __shfl_xor_sync(0xffffffff, v, 1); }\n",
                 id="pair-swap"),
    pytest.param(  # an xor butterfly over 32 lanes read by every lane: each half gets its own sum, as each warp did
        "__global__ void k(float* o, float v) {\n"
        "    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffff, v, d);\n"
        "    o[blockIdx.x * blockDim.x + threadIdx.x] = v;\n}\n", id="allreduce-everyone-reads"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    if (warpSize > 32) v += __shfl_down_sync(0xffffffff, v, 32);\n"
        "    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "    if (threadIdx.x % warpSize == 0) atomicAdd(o, v);\n}\n", id="guarded-wave64-step"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    const int lane = threadIdx.x % warpSize;\n"
        "    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d, 32);\n"
        "    if (lane % 32 == 0) atomicAdd(o, v);\n}\n", id="explicit-width-with-warpsize"),
    pytest.param(
        "__global__ void k(unsigned* o) {\n"
        "    const int lane = threadIdx.x % 32;\n"
        "    atomicOr(&o[threadIdx.x / 32], 1u << lane);\n}\n", id="lane-bit-in-32-groups"),
    pytest.param(
        "__global__ void k(unsigned long long* o, bool p) {\n"
        "    const int lane = threadIdx.x % warpSize;\n"
        "    o[0] = __ballot_sync(0xffffffff, p) & (1ull << lane);\n}\n", id="64-bit-lane-bit"),
    pytest.param(  # a 32 that sizes a tile in a file whose only cross-lane code is elsewhere
        "__global__ void tile(float* o) { __shared__ float t[32][33]; if (threadIdx.x < 32) t[0][threadIdx.x] = 1.f;"
        " o[threadIdx.x] = t[0][threadIdx.x % 32]; }\n"
        "__global__ void red(float* o, float v) {\n"
        "    for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);\n"
        "    if (threadIdx.x % warpSize == 0) atomicAdd(o, v);\n}\n", id="tile-and-reduction"),
    pytest.param("__global__ void k(float* s) { s[threadIdx.x] = 1.f; __syncwarp(); s[0] = s[31]; }\n",
                 id="syncwarp"),
    pytest.param(  # a guard on 32 threads that holds no cross-lane work, next to a wave reduction
        "__global__ void k(float* o, const float* x) {\n"
        "    __shared__ float t[32];\n"
        "    if (threadIdx.x < 32) t[threadIdx.x] = x[threadIdx.x];\n"
        "    __syncthreads();\n"
        "    float v = x[threadIdx.x] * t[0];\n"
        "    for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffff, v, d);\n"
        "    o[threadIdx.x] = v;\n"
        "    o[blockDim.x + threadIdx.x] = t[threadIdx.x % 32];\n}\n", id="tile-guard-next-to-reduction"),
    pytest.param(
        "__global__ void k(float* o, float v) {\n"
        "    const int lane = threadIdx.x % warpSize;\n"
        "    const float first = __shfl_sync(0xffffffff, v, 0);\n"
        "    const float last = __shfl_sync(0xffffffff, v, warpSize - 1);\n"
        "    if (lane == 0) o[0] = last - first;\n}\n", id="first-and-last-lane"),
]


@pytest.mark.parametrize("src", PORTABLE)
def test_portable(src: str) -> None:
    result = translate_source(src, "k.cu", prelude=False)
    assert not result.rewrites
    assert "_sync(" not in result.text.replace("__syncwarp", "")


@pytest.mark.parametrize("width, hint", [("", "start at warpSize / 2"), (", 32", "at its own lane 0")])
def test_tree_hint_follows_the_tree(width: str, hint: str) -> None:
    src = ("__device__ float red(float v) {\n"
           f"    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d{width});\n"
           "    return v;\n}\n"
           "__global__ void k(float* o, float x) {\n"
           "    const float s = red(x);\n"
           "    if (threadIdx.x % warpSize == 0) atomicAdd(o, s);\n}\n")
    with pytest.raises(TranslationError) as info:
        translate_source(src, "k.cu", prelude=False)
    (diag,) = info.value.diagnostics
    assert (diag.check, diag.line, diag.col) == ("wave32-tree-broadcast", 7, 9)
    assert hint in diag.hint and "the tree at 2:" in diag.message


def test_notes_say_why_lane_like_constants_were_kept() -> None:
    src = ("#define TILE 32\n"
           "__global__ void k(float* o, float v) {\n"
           "    for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffff, v, d);\n"
           "    o[blockIdx.x * 32 + threadIdx.y] = v;\n}\n"
           "__global__ void z(float* o) { o[threadIdx.x % TILE] = 0.f; }\n")
    notes = {(d.check, d.line, d.col): d.message for d in translate_source(src, "k.cu", prelude=False).notes}
    assert "judged where it is used" in notes[("not-a-lane-count", 1, 14)]
    assert "a size, tile edge or count" in notes[("not-a-lane-count", 4, 20)]
    assert "mask argument" in notes[("not-a-lane-count", 3, 68)]
    assert "wave size" in notes[("portable-wave", 3, 52)]


def test_prelude_files_are_not_analysed() -> None:
    src = ("PA_DEVICE float f(float v) {\n"
           "    v += __shfl_xor_sync(0xffffffffu, v, 16);\n"
           "    return __shfl_sync(0xffffffffu, v, 0);\n}\n")
    assert "__shfl(v, 0)" in translate_body(src, "pa_prelude.cuh", prelude=True, strict=True)
    with pytest.raises(TranslationError):
        translate_body(src, "k.cu", prelude=False)
