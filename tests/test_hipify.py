"""Tests of portattn-hipify (hipify/): the rule table, the refusals, and the generated src_hip/ tree."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hipify import RULES, TranslationError, main, translate_body, translate_file  # noqa: E402
from hipify.lexer import tokenize  # noqa: E402
from hipify.math_constants import header_block  # noqa: E402
from hipify.translate import int_value, split_header  # noqa: E402

REFUSED = object()  # expected "output" of a refusal rule

# One concrete input / expected output pair per rule id (kernel-file context unless the id is in PRELUDE_CTX).
EXAMPLES: dict[str, tuple[str, object]] = {
    "shfl-xor-sync": ("v += __shfl_xor_sync(mask, v, 1, w);", "v += __shfl_xor(v, 1, w);"),
    "shfl-sync": ("v = __shfl_sync(mask, v, src);", "v = __shfl(v, src);"),
    "shfl-up-sync": ("v = __shfl_up_sync(mask, v, 2, w);", "v = __shfl_up(v, 2, w);"),
    "shfl-down-sync": ("v = __shfl_down_sync(mask, v, 4);", "v = __shfl_down(v, 4);"),
    "ballot-sync": ("b = __ballot_sync(mask, x > 0);", "b = __ballot(x > 0);"),
    "any-sync": ("if (__any_sync(mask, ok)) f();", "if (__any(ok)) f();"),
    "all-sync": ("if (__all_sync(mask, ok)) f();", "if (__all(ok)) f();"),
    "syncwarp": (
        "s[i] = v; __syncwarp(); v = s[j];",
        (
            's[i] = v; (__builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"), __builtin_amdgcn_wave_barrier(), '
            '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront")); v = s[j];'
        ),
    ),
    "activemask": ("auto m = __activemask();", "auto m = __ballot(1);"),
    "trap": ("if (bad) __trap();", "if (bad) __builtin_trap();"),
    "nanosleep": ("__nanosleep(100);", REFUSED),
    "hmax": ("h = __hmax(a, b);", REFUSED),
    "hmin": ("h = __hmin(a, b);", REFUSED),
    "hmax2": ("h2 = __hmax2(a, b);", REFUSED),
    "hmin2": ("h2 = __hmin2(a, b);", REFUSED),
    "match-any-sync": ("m = __match_any_sync(mask, key);", REFUSED),
    "match-all-sync": ("m = __match_all_sync(mask, key, &pred);", REFUSED),
    "reduce-add-sync": ("s = __reduce_add_sync(mask, x);", REFUSED),
    "reduce-min-sync": ("s = __reduce_min_sync(mask, x);", REFUSED),
    "reduce-max-sync": ("s = __reduce_max_sync(mask, x);", REFUSED),
    "half": ("__half h = __float2half(x);", "__half h = __float2half(x);"),
    "half2": ("__half2 h2 = __halves2half2(a, b);", "__half2 h2 = __halves2half2(a, b);"),
    "nv-bfloat16": ("__nv_bfloat16 b;", REFUSED),
    "nv-bfloat162": ("__nv_bfloat162 b2;", REFUSED),
    "float2bfloat16": ("auto b = __float2bfloat16(x);", REFUSED),
    "bfloat162float": ("float f = __bfloat162float(b);", REFUSED),
    "inc-cuda-runtime": (
        "#include <cuda_runtime.h>\nint x;\n",
        "#if !defined(__HIPCC_RTC__)\n#include <hip/hip_runtime.h>\n#endif\nint x;\n",
    ),
    "inc-cuda-runtime-api": (
        "#include <cuda_runtime_api.h>\n",
        "#if !defined(__HIPCC_RTC__)\n#include <hip/hip_runtime.h>\n#endif\n",
    ),
    "inc-cuda": ("#include <cuda.h>\n", "#if !defined(__HIPCC_RTC__)\n#include <hip/hip_runtime.h>\n#endif\n"),
    "inc-device-launch-parameters": (
        '#include "device_launch_parameters.h"\n',
        "#if !defined(__HIPCC_RTC__)\n#include <hip/hip_runtime.h>\n#endif\n",
    ),
    "inc-cuda-fp16": (
        "#  include <cuda_fp16.h>  // half\n__half h;\n",
        "#if !defined(__HIPCC_RTC__)\n#include <hip/hip_fp16.h>\n#endif\n__half h;\n",
    ),
    "inc-math-constants": ("#include <math_constants.h>\nfloat x = CUDART_PI_F;\n",
                           header_block() + "\nfloat x = CUDART_PI_F;\n"),
    "inc-cuda-bf16": ("#include <cuda_bf16.h>\n", REFUSED),
    "inc-mma": ("#include <mma.h>\n", REFUSED),
    "inc-cooperative-groups": ("#include <cooperative_groups.h>\n", REFUSED),
    "inc-cuda-pipeline": ("#include <cuda_pipeline.h>\n", REFUSED),
    "inc-cstdint": ("#include <cstdint>\n", REFUSED),
    "inc-stdint": ("#include <stdint.h>\n", REFUSED),
    "inc-type-traits": ("#include <type_traits>\n", REFUSED),
    "api-cudaStream_t": ("cudaStream_t s = nullptr;", "hipStream_t s = nullptr;"),
    "api-cudaEvent_t": ("cudaEvent_t e;", "hipEvent_t e;"),
    "api-cudaError_t": ("cudaError_t err;", "hipError_t err;"),
    "api-cudaSuccess": ("ok = err == cudaSuccess;", "ok = err == hipSuccess;"),
    "api-cudaGetLastError": ("err = cudaGetLastError();", "err = hipGetLastError();"),
    "api-cudaGetErrorString": ("msg = cudaGetErrorString(err);", "msg = hipGetErrorString(err);"),
    "api-cudaMalloc": ("cudaMalloc(&p, n);", "hipMalloc(&p, n);"),
    "api-cudaFree": ("cudaFree(p);", "hipFree(p);"),
    "api-cudaMemcpy": ("cudaMemcpy(d, s, n, k);", "hipMemcpy(d, s, n, k);"),
    "api-cudaMemcpyAsync": ("cudaMemcpyAsync(d, s, n, k, st);", "hipMemcpyAsync(d, s, n, k, st);"),
    "api-cudaMemset": ("cudaMemset(p, 0, n);", "hipMemset(p, 0, n);"),
    "api-cudaMemsetAsync": ("cudaMemsetAsync(p, 0, n, st);", "hipMemsetAsync(p, 0, n, st);"),
    "api-cudaMemcpyHostToDevice": ("k = cudaMemcpyHostToDevice;", "k = hipMemcpyHostToDevice;"),
    "api-cudaMemcpyDeviceToHost": ("k = cudaMemcpyDeviceToHost;", "k = hipMemcpyDeviceToHost;"),
    "api-cudaMemcpyDeviceToDevice": ("k = cudaMemcpyDeviceToDevice;", "k = hipMemcpyDeviceToDevice;"),
    "api-cudaDeviceSynchronize": ("cudaDeviceSynchronize();", "hipDeviceSynchronize();"),
    "api-cudaStreamSynchronize": ("cudaStreamSynchronize(st);", "hipStreamSynchronize(st);"),
    "api-cudaFuncSetAttribute": ("cudaFuncSetAttribute(f, a, v);", "hipFuncSetAttribute(f, a, v);"),
    "api-cudaFuncAttributeMaxDynamicSharedMemorySize": (
        "a = cudaFuncAttributeMaxDynamicSharedMemorySize;",
        "a = hipFuncAttributeMaxDynamicSharedMemorySize;",
    ),
    "api-cudaDeviceProp": ("cudaDeviceProp prop;", "hipDeviceProp_t prop;"),
    "api-cudaGetDeviceProperties": ("cudaGetDeviceProperties(&prop, 0);", "hipGetDeviceProperties(&prop, 0);"),
    "api-cudaLaunchKernel": ("cudaLaunchKernel(f, g, b, a, s, st);", "hipLaunchKernel(f, g, b, a, s, st);"),
    "api-CUstream": ("CUstream st;", "hipStream_t st;"),
    "api-CUresult": ("CUresult r;", "hipError_t r;"),
    "api-CUDA_SUCCESS": ("ok = r == CUDA_SUCCESS;", "ok = r == hipSuccess;"),
    "api-CUdeviceptr": ("CUdeviceptr p;", "hipDeviceptr_t p;"),
    "api-CUfunction": ("CUfunction f;", "hipFunction_t f;"),
    "api-CUmodule": ("CUmodule m;", "hipModule_t m;"),
}

RULES_BY_ID = {r.id: r for r in RULES}


def hip(text: str, *, prelude: bool = False) -> str:
    """Project-mode translation (portattn's own rules); user mode is tested in tests/hipify/."""
    return translate_body(text, "k.cu", prelude=prelude, strict=True)


def refusals(text: str, *, prelude: bool = False, path: str = "k.cu") -> list:
    with pytest.raises(TranslationError) as info:
        translate_body(text, path, prelude=prelude, strict=True)
    return info.value.diagnostics


# ---- the rule table ------------------------------------------------------------------------------------------


def test_every_rule_has_an_example() -> None:
    assert set(EXAMPLES) == set(RULES_BY_ID)


@pytest.mark.parametrize("rule_id", sorted(RULES_BY_ID))
def test_rule(rule_id: str) -> None:
    rule = RULES_BY_ID[rule_id]
    source, expected = EXAMPLES[rule_id]
    assert rule.cuda in source
    if expected is REFUSED:
        (diag,) = refusals(source)
        assert rule.cuda in diag.message
        assert diag.hint == rule.note and diag.check == rule.id
        assert (diag.line, diag.col) == (1, source.index(rule.cuda) + 1 - (1 if rule.kind == "refuse-include" else 0))
    else:
        assert hip(source) == expected
        assert hip(expected) == expected  # the output is a fixed point


def test_rule_records_are_complete() -> None:
    for rule in RULES:
        assert rule.id and rule.cuda and rule.note
        assert bool(rule.hip) == (rule.kind in ("rename", "drop-mask", "replace-call", "include"))
        assert bool(rule.arity) == (rule.kind in ("drop-mask", "replace-call"))


# ---- call rewriting ------------------------------------------------------------------------------------------


def test_mask_with_nested_parentheses() -> None:
    src = "v = __shfl_xor_sync(pick(a, (b | c), d[(e)]), g(v, 2), (1 << k), w);"
    assert hip(src) == "v = __shfl_xor(g(v, 2), (1 << k), w);"


def test_nested_calls_are_rewritten() -> None:
    src = "v = __shfl_sync(__activemask(), __shfl_xor_sync(m, v, 1), __ballot_sync(m, p) & 1);"
    assert hip(src) == "v = __shfl(__shfl_xor(v, 1), __ballot(p) & 1);"


def test_multiline_call_and_comments_inside() -> None:
    src = "v = __shfl_down_sync(\n    mask,  // all lanes\n    v, 1);"
    assert hip(src) == "v = __shfl_down(\n    // all lanes\n    v, 1);"


def test_call_inside_macro_definition() -> None:
    src = "#define SHFL(v, m) __shfl_xor_sync(full, v, m)\nint x;\n"
    assert hip(src) == "#define SHFL(v, m) __shfl_xor(v, m)\nint x;\n"


def test_prelude_style_call() -> None:
    src = "return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);"
    assert hip(src, prelude=True) == "return __shfl_xor(v, lane_mask, width);"


def test_syncwarp_with_mask() -> None:
    out = hip("__syncwarp(m);")
    assert out.startswith("(__builtin_amdgcn_fence(") and "(m)" not in out


@pytest.mark.parametrize(
    "src, col, message",
    [
        ("v = __shfl_xor_sync(m, v);", 5, "expects 3 or 4 arguments, found 2"),
        ("b = __ballot_sync(m, p, q);", 5, "expects 2 arguments, found 3"),
        ("m = __activemask(x);", 5, "expects 0 arguments, found 1"),
        ("auto f = __shfl_xor_sync;", 10, "not called with an argument list"),
        ("#define F __shfl_sync\n", 11, "not called with an argument list"),
        ("v = __shfl_xor_sync(m++, v, 1);", 22, "side effect"),
        ("v = __shfl_xor_sync(m = f(), v, 1);", 23, "side effect"),
    ],
)
def test_bad_call_forms_are_refused(src: str, col: int, message: str) -> None:
    (diag,) = refusals(src)
    assert (diag.check, diag.line, diag.col) == ("call-form", 1, col)
    assert message in diag.message


# ---- refusals and their positions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, line, col, message, check",
    [
        ("int a;\n  asm(\"trap;\");\n", 2, 3, "inline assembly 'asm'", "inline-asm"),
        ("x;\nvoid f() { asm volatile(\"membar.gl;\"); }\n", 2, 12, "inline assembly 'asm'", "inline-asm"),
        ("__asm__(\"nop\");", 1, 1, "inline assembly '__asm__'", "inline-asm"),
        ("int n = 32;", 1, 9, "lane constant '32'", "lane-constant"),
        ("if (lane == 31) f();", 1, 13, "lane constant '31'", "lane-constant"),
        ("m = 0xffffffff;", 1, 5, "lane constant '0xffffffff'", "lane-constant"),
        ("m = 0xFFFFFFFFu;", 1, 5, "lane constant '0xFFFFFFFFu'", "lane-constant"),
        ("m = 0xFFFF'FFFFULL;", 1, 5, "lane constant", "lane-constant"),
        ("x = y & 0x1f;", 1, 9, "lane constant '0x1f'", "lane-constant"),
        ("x = 32u * y;", 1, 5, "lane constant '32u'", "lane-constant"),
        ("\n\n  int w = warpSize;", 3, 11, "warpSize outside the prelude", "warpsize-outside-prelude"),
        ("#if PA_WARP_SIZE == 32\n#endif\n", 1, 21, "lane constant '32'", "lane-constant"),
        ("__nv_bfloat16 x;", 1, 1, "__nv_bfloat16 cannot be translated", "nv-bfloat16"),
        ("cudaFooBar(x);", 1, 1, "no HIP mapping for CUDA runtime name 'cudaFooBar'", "unknown-cuda-api"),
        ("#include <cuda/std/limits>\n", 1, 10, "no HIP mapping for #include <cuda/std/limits>", "unknown-cuda-header"),
        ("#include <curand_kernel.h>\n#include <cuda_awbarrier.h>\n", 2, 10, "no HIP mapping", "unknown-cuda-header"),
    ],
)
def test_refusal_positions(src: str, line: int, col: int, message: str, check: str) -> None:
    diags = refusals(src)
    assert len(diags) == 1
    d = diags[0]
    assert (d.line, d.col, d.check) == (line, col, check)
    assert message in d.message
    assert d.hint
    assert str(d).startswith(f"k.cu:{line}:{col}: error: ")


def test_all_refusals_of_a_file_are_reported() -> None:
    diags = refusals("int a = 32;\nint b = warpSize;\nasm(\"x\");\n")
    assert [(d.check, d.line, d.col) for d in diags] == [
        ("lane-constant", 1, 9), ("warpsize-outside-prelude", 2, 9), ("inline-asm", 3, 1)]


def test_lane_constants_allowed_in_prelude_and_other_numbers_everywhere() -> None:
    assert hip("m = 0xffffffffu; n = 32; k = 31;", prelude=True) == "m = 0xffffffffu; n = 32; k = 31;"
    src = "a = 64; b = 16; c = 0xff800000; d = 32.f; e = 3.2e1; f = 1e32; g = 0x7fffffff; h = 33;"
    assert hip(src) == src


@pytest.mark.parametrize(
    "src, context",
    [
        ("float v = pa_group_max<warpSize>(x);", "template argument"),
        ("x = f<A, (warpSize > 32)>(y);", "template argument"),
        ("__shared__ float buf[warpSize];", "array size"),
        ('static_assert(warpSize == 64, "wave64");', "static_assert argument"),
        ("constexpr int W = warpSize;", "constexpr statement"),
        ("if constexpr (warpSize == 64) f();", "constexpr statement"),
        ("enum { kW = warpSize };", "enumerator"),
        ("switch (n) { case warpSize: break; }", "case statement"),
        ("#if warpSize == 64\n#endif\n", "preprocessor directive"),
        ("__global__ void __launch_bounds__(4 * warpSize) k();", "__launch_bounds__ argument"),
    ],
)
def test_warpsize_constant_contexts_refused_in_prelude(src: str, context: str) -> None:
    (diag,) = refusals(src, prelude=True)
    assert (diag.check, diag.line, diag.col) == ("warpsize-constant", 1, src.index("warpSize") + 1)
    assert "warpSize" in diag.message and context in diag.message


@pytest.mark.parametrize(
    "src",
    [
        "int lane = threadIdx.x % warpSize;",
        "for (int i = 0; i < warpSize; ++i) s += a[i];",
        "if (a < warpSize && b > c) f();",
        "return buf[warpSize - 1];",
        "x = f<int>(warpSize);",
    ],
)
def test_warpsize_runtime_use_accepted_in_prelude(src: str) -> None:
    assert hip(src, prelude=True) == src


# ---- comments, strings and literals are not code --------------------------------------------------------------


def test_comments_and_literals_are_skipped() -> None:
    src = (
        "// __shfl_xor_sync(0xffffffff, v, 1) asm( warpSize 32\n"
        "/* asm volatile(\"x\"); __syncwarp(); 31\n   cudaMalloc __nv_bfloat16 */\n"
        'const char* s = "asm( __shfl_sync(32) warpSize \\" 0xffffffff";\n'
        "char c = '3'; char q = '\\''; auto r = R\"x(asm( 32 )\" )x\";\n"
        "#include \"cuda_like_name.h\"\n"
        "#error \"needs 32 lanes\"\n"
    )
    assert hip(src) == src


def test_tokenizer_round_trips_the_sources() -> None:
    for path in sorted((REPO / "src_cuda").iterdir()):
        text = path.read_text()
        assert "".join(t.text for t in tokenize(text)) == text


def test_unterminated_comment_is_reported() -> None:
    (diag,) = refusals("int a;\n/* open")
    assert (diag.check, diag.line, diag.col) == ("syntax", 2, 1) and "unterminated" in diag.message


# ---- vendor-guarded prelude sections -----------------------------------------------------------------------------

ASM = 'asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));'


@pytest.mark.parametrize(
    "guard",
    [
        "#if defined(PA_VENDOR_CUDA)\n{asm}\n#else\ny = exp2f(x);\n#endif\n",
        "#ifdef PA_VENDOR_CUDA\n{asm}\n#endif\n",
        "#if defined PA_VENDOR_CUDA && PA_WARP_SIZE == 32\n{asm}\n#endif\n",
        "#ifndef PA_VENDOR_HIP\n{asm}\n#endif\n",
        "#if !defined(PA_VENDOR_HIP)\n{asm}\n#endif\n",
        "#if defined(PA_VENDOR_HIP)\ny = exp2f(x);\n#else\n{asm}\n#endif\n",
        "#ifdef PA_VENDOR_HIP\ny = exp2f(x);\n#elif PA_WARP_SIZE == 64\n{asm}\n#endif\n",
        "#if defined(PA_VENDOR_CUDA)\n#if PA_WARP_SIZE == 64\n{asm}\n#else\n{asm}\n#endif\n{asm}\n#endif\n",
    ],
)
def test_guarded_asm_accepted_in_prelude(guard: str) -> None:
    src = guard.replace("{asm}", ASM)
    assert hip(src, prelude=True) == src


@pytest.mark.parametrize(
    "guard, line",
    [
        ("#if defined(PA_VENDOR_CUDA)\n#endif\n{asm}\n", 3),
        ("#if defined(PA_VENDOR_CUDA)\ny = exp2f(x);\n#else\n{asm}\n#endif\n", 4),
        ("#if defined(PA_VENDOR_HIP)\n{asm}\n#endif\n", 2),
        ("#if defined(PA_VENDOR_CUDA) || defined(FAST)\n{asm}\n#endif\n", 2),
        ("#if defined(PA_VENDOR_HIP) && defined(FAST)\n#else\n{asm}\n#endif\n", 3),
        ("#if FAST\n{asm}\n#endif\n", 2),
        ("#if defined(PA_VENDOR_CUDA)\n#if X\n#endif\n#else\n#if Y\n{asm}\n#endif\n#endif\n", 6),
    ],
)
def test_unguarded_asm_refused_in_prelude(guard: str, line: int) -> None:
    (diag,) = refusals(guard.replace("{asm}", ASM), prelude=True, path="pa_prelude.cuh")
    assert (diag.check, diag.line, diag.col) == ("inline-asm", line, 1)
    assert str(diag).startswith(f"pa_prelude.cuh:{line}:1: error: inline assembly")


def test_guarded_asm_refused_outside_prelude() -> None:
    (diag,) = refusals(f"#if defined(PA_VENDOR_CUDA)\n{ASM}\n#endif\n", prelude=False)
    assert (diag.check, diag.line, diag.col) == ("inline-asm", 2, 1) and "only the prelude" in diag.message


@pytest.mark.parametrize("name", [
    "pa_prelude.cuh", "src_cuda/pa_prelude_elem.cuh", "pa_mma.cuh", "pa_mma_sync.cuh", "pa_mma_tf32.cuh",
    "pa_mma_wgmma.cuh", "a\\pa_mma_mfma.cuh", "src_cuda/pa_mfma.cuh", "pa_mfma_tiles.cuh",
])
def test_prelude_files_by_pattern(name: str) -> None:
    from hipify.translate import is_prelude

    assert is_prelude(name)


@pytest.mark.parametrize("name", [
    "pa_softmax.cuh", "pa_tile_io.cuh", "pa_mask.cuh", "pa_params.cuh", "pa_fwd_params.cuh",
    "src_cuda/pa_mfma_probe.cu", "pa_prelude_probe.cu", "my_pa_prelude.cuh", "kernel.cu",
])
def test_other_files_are_not_prelude(name: str) -> None:
    from hipify.translate import is_prelude

    assert not is_prelude(name)


def test_prelude_keeps_its_guarded_asm() -> None:
    src = REPO / "src_cuda" / "pa_mfma.cuh"
    text = src.read_text()
    assert "asm(" in text and translate_file(text, "src_cuda/pa_mfma.cuh", str(src), strict=True).endswith(text)


def test_project_kernel_file_keeps_strict_rules() -> None:
    """A kernel file of portattn's tree (say pa_softmax.cuh) may not use warpSize or a lane constant directly."""
    diags = refusals("PA_DEVICE float f(float v) { return v * warpSize + 32; }\n", path="pa_softmax.cuh")
    assert [(d.check, d.col) for d in diags] == [("warpsize-outside-prelude", 41), ("lane-constant", 52)]


def test_guarded_cuda_section_is_kept_verbatim() -> None:
    cuda = "#if defined(PA_VENDOR_CUDA)\nv = __shfl_xor_sync(0xffffffffu, v, 1);\n#else\n"
    src = cuda + "v = __shfl_xor_sync(m, v, 1);\n#endif\n"
    expected = cuda + "v = __shfl_xor(v, 1);\n#endif\n"
    assert hip(src, prelude=True) == expected


def test_int_value() -> None:
    assert [int_value(s) for s in ("32", "040", "0x20", "0b100000", "32ull", "0XFFFFFFFFU", "1'0")] == [
        32, 32, 32, 32, 32, 0xFFFFFFFF, 10]
    assert int_value("32.0f") is None and int_value("1e5") is None


# ---- whole files and the command line -------------------------------------------------------------------------


def test_header_and_idempotency_of_translate_file() -> None:
    out = translate_file("v = __shfl_xor_sync(m, v, 1);\n", "src_cuda/a.cu", "/abs/src_cuda/a.cu", strict=True)
    assert out == "// generated by portattn-hipify from src_cuda/a.cu, do not edit\nv = __shfl_xor(v, 1);\n"
    assert translate_file(out, "src_hip/a.cu", "src_hip/a.cu", strict=True) == out
    assert split_header(out)[0] == "src_cuda/a.cu"


def _make_tree(root: Path) -> Path:
    src = root / "src_cuda"
    (src / "sub").mkdir(parents=True)
    (src / "pa_prelude.cuh").write_text(
        "#pragma once\n#if defined(PA_VENDOR_CUDA)\n" + ASM + "\n#endif\n"
        "PA_DEVICE float f(float v) { return __shfl_xor_sync(0xffffffffu, v, 1, PA_WARP_SIZE); }\n"
    )
    (src / "k.cu").write_text(
        '#include "pa_prelude.cuh"\n#include <cuda_fp16.h>\n__global__ void k() { __syncwarp(); }'
    )
    (src / "sub" / "x.h").write_text("// header\nint y = cudaSuccess;\n")
    (src / "notes.txt").write_text("not a source")
    return src


def test_cli_generates_deterministic_idempotent_output(tmp_path: Path) -> None:
    src = _make_tree(tmp_path)
    out1, out2, out3 = tmp_path / "o1", tmp_path / "o2", tmp_path / "o3"
    assert main([str(src), "-o", str(out1), "-q"]) == 0
    assert main([str(src), "-o", str(out2), "-q"]) == 0
    names = sorted(p.relative_to(out1).as_posix() for p in out1.rglob("*") if p.is_file())
    assert names == ["k.cu", "pa_prelude.cuh", "sub/x.h"]
    for name in names:
        text = (out1 / name).read_bytes()
        assert text == (out2 / name).read_bytes()
        assert text.startswith(f"// generated by portattn-hipify from src_cuda/{name}, do not edit\n".encode())
        assert str(tmp_path).encode() not in text
    # running on its own output changes nothing; writing into the input folder itself is refused
    assert main([str(out1), "-o", str(out3), "-q"]) == 0
    assert main([str(out1), "-o", str(out1), "-q"]) == 2
    for name in names:
        assert (out3 / name).read_bytes() == (out2 / name).read_bytes() == (out1 / name).read_bytes()
    assert main([str(src), "-o", str(out1), "--check"]) == 0


def test_check_detects_stale_missing_and_extra_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _make_tree(tmp_path)
    out = tmp_path / "out"
    assert main([str(src), "-o", str(out), "--check"]) == 1  # nothing generated yet
    assert not out.exists()  # --check writes nothing
    assert main([str(src), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main([str(src), "-o", str(out), "--check"]) == 0
    (out / "k.cu").write_text((out / "k.cu").read_text() + "// edited\n")
    (out / "sub" / "x.h").unlink()
    (out / "old.cuh").write_text("// generated by portattn-hipify from src_cuda/old.cuh, do not edit\n")
    assert main([str(src), "-o", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"stale: {out.as_posix()}/k.cu" in err
    assert f"missing: {out.as_posix()}/sub/x.h" in err
    assert f"extra: {out.as_posix()}/old.cuh" in err
    assert "pa_prelude.cuh" not in err
    assert main([str(src), "-o", str(out), "-q"]) == 0  # regenerating fixes all three
    assert not (out / "old.cuh").exists()
    assert main([str(src), "-o", str(out), "--check"]) == 0


def test_cli_refusal_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _make_tree(tmp_path)
    (src / "bad.cu").write_text("int ok;\nint lanes = 32;\n")
    out = tmp_path / "out"
    assert main([str(src), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{src / 'bad.cu'}:2:13: error: lane constant '32' outside the prelude" in err
    assert "hint:" in err
    assert not out.exists()


def test_cli_usage_errors(tmp_path: Path) -> None:
    assert main([]) == 2
    assert main([str(tmp_path / "nope"), "-o", str(tmp_path / "out")]) == 2


def test_python_dash_m(tmp_path: Path) -> None:
    src = _make_tree(tmp_path)
    run = subprocess.run([sys.executable, "-m", "hipify", str(src), "-o", str(tmp_path / "o"), "--check"],
                         cwd=REPO, capture_output=True, text=True, check=False)
    assert run.returncode == 1 and "missing:" in run.stderr


def test_committed_src_hip_is_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["src_cuda", "-o", "src_hip", "--check"]) == 0, "regenerate: portattn-hipify src_cuda -o src_hip"
