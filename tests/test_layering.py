"""The package's folders are its layers, and no module reaches up a layer (read from the import statements)."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "portattn"
# Bottom to top; a module may import from its own layer and the ones below. "base" is what every layer may use.
LAYERS = ["base", "runtime", "kernels", "ops", "integrations", "tools", "package"]
BASE_MODULES = {"errors", "version", "_moved"}


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]  # drop "portattn"
    if not parts or parts == ["__main__"]:
        return "package"
    if len(parts) == 1 and parts[0] in BASE_MODULES:
        return "base"
    if parts[0] in LAYERS:
        return parts[0]
    raise AssertionError(f"{module} is in no layer: put it in one of the layer folders")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of each portattn module that ``path`` imports."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "portattn"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "portattn":
                continue
            if node.module is None or target in ("portattn", *(f"portattn.{layer}" for layer in LAYERS)):
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]  # "from . import x"
            else:
                found.append((node.lineno, target))
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_no_module_reaches_up_a_layer(path):
    mine = LAYERS.index(layer_of(module_name(path)))
    for line, target in imported_modules(path):
        if target == "portattn.__version__":
            raise AssertionError(f"{path.name}:{line} imports the package root; use portattn.version")
        theirs = LAYERS.index(layer_of(target))
        assert theirs <= mine, (f"{module_name(path)} (layer {LAYERS[mine]}) imports {target} (layer "
                                f"{LAYERS[theirs]}) at line {line}")


def test_every_layer_folder_is_a_package():
    for layer in LAYERS[1:-1]:
        assert (PACKAGE / layer / "__init__.py").is_file(), layer
