"""The scripts under scripts/ import only what the package has (read from their import statements; nothing runs)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").glob("*.py"))


def package_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of each portattn import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "portattn"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "portattn":
            found += [(node.lineno, node.module, a.name) for a in node.names]
    return found


def test_there_are_scripts():
    assert SCRIPTS


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_imports_resolve(path):
    for line, module, name in package_imports(path):
        where = f"{path.name}:{line}"
        try:
            target = importlib.import_module(module)
        except ImportError as e:
            raise AssertionError(f"{where} imports {module}: {e}") from None
        if name is not None and not hasattr(target, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                raise AssertionError(f"{where}: {module} has no {name}") from None
