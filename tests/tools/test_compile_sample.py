"""The sample of shipped variants that routine test runs compile."""
from portattn.kernels import shipped_variants
from portattn.runtime.target import Target
from portattn.tools.testing import FULL_MATRIX_ENV, compile_sample


def test_one_variant_per_kernel_function_and_dtype_the_largest_first(monkeypatch):
    monkeypatch.delenv(FULL_MATRIX_ENV, raising=False)
    specs = shipped_variants(Target.for_arch("gfx90a"))
    groups = {(s.function, s.dtype) for s in specs}
    first, second = compile_sample(specs, 0), compile_sample(specs, 1)
    for sample in (first, second):
        assert sorted((s.function, s.dtype) for s in sample) == sorted(groups)
        assert [s for s in specs if s in sample] == sample  # in the given order
    for spec in first:  # rotation 0: the largest head dim with extended masks of its group
        group = [s for s in specs if (s.function, s.dtype) == (spec.function, spec.dtype)]
        assert spec.head_dim == max(s.head_dim for s in group)
        assert spec.mask_ext or not any(s.mask_ext for s in group)
    assert any(a is not b for a, b in zip(first, second))
    by_function = compile_sample(specs, 0, by_dtype=False)
    assert sorted(s.function for s in by_function) == sorted({s.function for s in specs})


def test_full_matrix_takes_every_variant(monkeypatch):
    specs = shipped_variants(Target.for_arch("sm_90"))
    monkeypatch.setenv(FULL_MATRIX_ENV, "1")
    assert compile_sample(specs, 2, by_dtype=False) == specs
