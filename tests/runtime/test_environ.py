"""The per-call environment reads (runtime/environ.py) give what os.environ gives, as variables are set, changed and
removed."""
import os

import pytest

from portattn.runtime import environ

NAME = "PORTATTN_TEST_ENVIRON"


@pytest.mark.parametrize("value", ["64", "", " mma ", "caf\u00e9", "a=b"])
def test_reads_follow_os_environ(monkeypatch, value):
    monkeypatch.delenv(NAME, raising=False)
    assert environ.get(NAME) is None
    monkeypatch.setenv(NAME, value)
    assert environ.get(NAME) == os.environ.get(NAME) == value
    monkeypatch.setenv(NAME, value + "x")
    assert environ.get(NAME) == value + "x"
    monkeypatch.delenv(NAME)
    assert environ.get(NAME) is None
