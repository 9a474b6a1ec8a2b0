"""The command line without a GPU: info, plot from a bench JSON file, warmup for a named arch."""
import json
import pickle
from dataclasses import asdict, replace

import pytest
import torch

import portattn.tools.plot
import portattn.tools.report
from portattn.errors import CompileError, DriverError
from portattn.kernels import shipped_variants
from portattn.kernels.backward import BwdSpec
from portattn.kernels.forward import select
from portattn.runtime.compiler import clear_memory_cache
from portattn.runtime.target import Target
from portattn.tools.bench import BenchRow
from portattn.tools.cli import main
from portattn.tools.testing import compile_sample

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_info(capsys):
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    assert f"portattn {portattn.__version__}, torch {torch.__version__}" in text
    assert "cuda-bindings" in text and "NVRTC" in text and "hip-python" in text
    assert "cache: " in text
    if torch.cuda.is_available():
        assert "target: cuda:" in text or "target: hip:" in text
    else:
        assert "target: no GPU" in text


def test_info_for_named_archs(capsys):
    assert main(["info", "--arch", "sm_90", "gfx90a"]) == 0
    text = capsys.readouterr().out
    assert "target: cuda:sm_90 (32 lanes)" in text and "target: hip:gfx90a (64 lanes)" in text
    for arch in ("sm_90", "gfx90a"):
        for spec in shipped_variants(Target.for_arch(arch)):
            if spec == select(Target.for_arch(arch), spec.dtype, spec.head_dim):  # the selector's choice
                assert f"  {spec.dtype} d={spec.head_dim}: {spec.label}\n" in text
            if isinstance(spec, BwdSpec) and spec.stage == "dkdv" and spec.kernel == "mma" and not spec.mask_ext:
                assert f"  {spec.dtype} d={spec.head_dim}, backward: {spec.label}; deterministic dQ: " in text
    assert "float32 d=64: pa_flash_fwd_ws[d=64," in text  # sm_90: the warpgroup MMA, TF32
    assert "float32 d=64: pa_flash_fwd_mma[d=64," in text  # gfx90a
    assert "float32 d=256: pa_flash_fwd_simt[d=256," in text  # gfx90a: no matrix-unit tile fits
    assert main(["info", "--arch", "sm_70"]) == 2
    assert "unknown arch 'sm_70'" in capsys.readouterr().err


def _bench_json(path):
    rows = [BenchRow("float32", d, causal, n, 32768 // n, 16, 1.0, 20.0 + d / 64 + n / 4096, 1e-6,
                     {"flash": None, "cudnn": None, "efficient": 30.0 + n / 4096})
            for d in (64, 128) for causal in (False, True) for n in (1024, 4096, 8192)]
    path.write_text(json.dumps({"meta": {"device": "test GPU", "torch": "2.x"}, "rows": [asdict(r) for r in rows]}))
    return path


def test_plot_from_bench_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    src = _bench_json(tmp_path / "bench.json")
    out = tmp_path / "out.png"
    assert main(["plot", str(src), "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert main(["plot", str(src)]) == 0  # default: next to the JSON file
    assert (tmp_path / "bench.png").read_bytes().startswith(PNG_SIGNATURE)


def test_plot_rejects_other_json(tmp_path, capsys):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"rows": [{"x": 1}]}))
    assert main(["plot", str(bad)]) == 2
    assert "not a portattn bench JSON file" in capsys.readouterr().err


def test_missing_matplotlib_is_reported_before_benchmarking(tmp_path, monkeypatch, capsys):
    real = portattn.tools.plot.importlib.util.find_spec
    monkeypatch.setattr(portattn.tools.plot.importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["bench", "--plot", str(tmp_path / "b.png"), "--json", str(tmp_path / "b.json")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists(), "nothing was run"
    assert main(["plot", str(_bench_json(tmp_path / "bench.json"))]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    clear_memory_cache()
    monkeypatch.setenv("PORTATTN_CACHE_DIR", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    clear_memory_cache()


def test_warmup_named_arch(cache_dir, capsys, monkeypatch):
    """Warmup compiles what the report lists (here a sample of the variants, which keeps the test short) into the
    disk cache, and a second warmup reads them back."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed")
    specs = compile_sample(shipped_variants(Target.for_arch("sm_90")), rotation=2, by_dtype=False)[:3]
    monkeypatch.setattr(portattn.tools.report, "shipped_variants", lambda target: specs)
    total = len(specs)
    assert main(["warmup", "--arch", "sm_90", "--jobs", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert [line.split(": ")[0] for line in lines] == [f"[{n}/{total}] sm_90 {spec.dtype} {spec.label}"
                                                      for n, spec in enumerate(specs, 1)]
    assert all(": compiled in " in line for line in lines)
    assert len(list(cache_dir.glob("*.bin"))) == total
    clear_memory_cache()
    assert main(["warmup", "--arch", "sm_90", "--jobs", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert len(lines) == total and all(": read from the cache in " in line for line in lines)


def test_warmup_in_processes(cache_dir, capsys, monkeypatch):
    """With --jobs 2 the variants compile in two processes, in any order, into the same disk cache; a variant that
    fails to compile there raises its CompileError, log included, in the caller."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed")
    specs = compile_sample(shipped_variants(Target.for_arch("sm_90")), rotation=3, by_dtype=False)[:3]
    monkeypatch.setattr(portattn.tools.report, "shipped_variants", lambda target: specs)
    assert main(["warmup", "--arch", "sm_90", "--jobs", "2"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in lines] == [f"[{n}/{len(specs)}" for n in range(1, len(specs) + 1)]
    assert {line.split("] ", 1)[1].split(": ")[0] for line in lines} == {f"sm_90 {spec.dtype} {spec.label}"
                                                                         for spec in specs}
    assert len(list(cache_dir.glob("*.bin"))) == len(specs)
    broken = replace(specs[0], test_defines=(("PA_SMEM_BYTES", 1),))  # fails the kernel's shared-memory check
    monkeypatch.setattr(portattn.tools.report, "shipped_variants", lambda target: [specs[1], broken])
    with pytest.raises(CompileError) as err:
        portattn.tools.report.report_rows(Target.for_arch("sm_90"), jobs=2)
    assert err.value.arch.startswith("sm_90") and "PA_SMEM_BYTES" in err.value.log


def test_errors_survive_pickling():
    """The errors of compiler worker processes reach the caller whole."""
    compile_error = CompileError("nvrtc", "sm_90a", ["-O3"], "error: log", "int x;", "k.cu")
    driver_error = DriverError("cuda", "cuModuleLoadData", 200, "bad image")
    for e in (compile_error, driver_error):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e) and vars(back) == vars(e)


def test_warmup_needs_a_gpu_or_an_arch(cache_dir, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["warmup"]) == 2
    assert "--arch" in capsys.readouterr().err
    assert main(["warmup", "--arch", "sm_70"]) == 2
    assert "unknown arch" in capsys.readouterr().err


def test_report_rows_name_the_tile_options():
    from portattn.runtime.resources import Resources
    from portattn.tools.report import ReportRow, format_rows

    hopper = Target.for_arch("sm_90")
    res = Resources(registers=180, static_smem=0, spill_bytes=0, scratch_bytes=0)
    text = format_rows([ReportRow("sm_90", select(hopper, "float16", 128), res, "1 blocks/SM"),
                        ReportRow("sm_90", select(hopper, "float16", 64, "mma"), res, "2 blocks/SM")])
    assert "| pa_flash_fwd_ws | float16 | 128 | 128x128, wgmma, 2 stages, 2 Q stages | 384 |" in text
    assert "| float16 | 64 | 128x64, wgmma, 2/SM | 256 |" in text


@pytest.mark.parametrize("args, message", [
    (["--heads", "3:2"], "--heads must be H or HQ:HK"),
    (["--heads", "x"], "--heads must be H or HQ:HK"),
    (["--heads", "32:8", "--backward"], "equal query and key/value heads"),
])
def test_bench_refuses_bad_heads(capsys, args, message):
    assert main(["bench", *args]) == 2
    assert message in capsys.readouterr().err
