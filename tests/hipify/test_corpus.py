"""The corpus of small CUDA kernels (corpus/*.cu) gets the verdict each file states: translated as it is, rewritten
at the stated positions, or refused with the stated checks at the stated positions, and nothing else."""
from __future__ import annotations

from collections import Counter

import pytest

from hipify import TranslationError, translate
from hipify.wave64 import CHECKS as WAVE64_CHECKS


def test_corpus_is_large_and_mixed(corpus) -> None:
    actions = Counter(c.action for c in corpus)
    assert len(corpus) >= 30
    assert actions["translate"] >= 15 and actions["rewrite"] >= 3 and actions["refuse"] >= 12, actions


def test_every_wave64_refusal_and_rewrite_is_in_the_corpus(corpus) -> None:
    seen = {check for c in corpus for check, _, _ in c.expected}
    kinds = {check for check, text in WAVE64_CHECKS.items() if not text.startswith("note:")}
    assert kinds <= seen, kinds - seen


def test_verdict(case) -> None:
    if case.action == "refuse":
        with pytest.raises(TranslationError) as info:
            translate(case.text, f"corpus/{case.name}", case.name)
        diags = info.value.diagnostics
        assert {(d.check, d.line, d.col) for d in diags} == case.expected
        assert len(diags) == len(case.expected)
        for d in diags:
            assert d.message and d.hint and str(d).startswith(f"{case.name}:{d.line}:{d.col}: error: ")
        return
    result = translate(case.text, f"corpus/{case.name}", case.name)
    assert {(d.check, d.line, d.col) for d in result.rewrites} == case.expected
    for d in result.rewrites:
        assert d.message.startswith("rewritten: ") and d.severity == "note"
    again = translate(result.text, "ignored", case.name)
    assert again.text == result.text and not again.rewrites  # the output is a fixed point
    _assert_width_32_added(case, result.text)


def _assert_width_32_added(case, text: str) -> None:
    """Each reported call (and no other) got ", 32" before its closing parenthesis."""
    lines = text.splitlines()[1:]  # below the generated header
    for _, line, col in case.expected:
        call = lines[line - 1][col - 1:]
        assert call.startswith("__shfl"), call
        depth, end = 0, 0
        for end, ch in enumerate(call):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == ")" and depth == 0:
                break
        assert call[:end].endswith(", 32"), call[:end + 1]
    assert text.count(", 32)") == len(case.expected) + case.text.count(", 32)")
