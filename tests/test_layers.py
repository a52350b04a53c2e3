"""The house's floors (docs/conventions.md, "Layout"): every import in
leveret points down or sideways within its floor, never up, and no two
modules import each other in a circle. Imports inside functions count:
a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "leveret"

# Floor of each top-level part of the package, bottom first. A module may
# import its own floor and the floors below.
FLOORS = {
    "_validate": 0,
    "backends": 0,
    "resources": 0,
    "filters": 0,
    "geometry": 0,
    "io": 0,
    "cpu": 1,
    "cuda": 1,
    "operators": 2,
    "phantom": 2,
    "algorithms": 3,
    "torch": 3,
    "rabbitct": 3,
    "preprocess": 4,
    "datasets": 4,
    "execution": 5,
    "live": 6,
    "cli": 7,
    "__main__": 7,
    "__init__": 7,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(("leveret",) + parts)


def _imports(path: Path) -> set[str]:
    """The leveret modules ``path`` imports, anywhere in it."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("leveret")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("leveret"):
                continue
            for alias in node.names:  # "from . import x" may name a module
                candidate = f"{target}.{alias.name}"
                found.add(candidate if _exists(candidate) else target)
    return {_existing(m) for m in found} - {name}


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").exists() or (PACKAGE / rel / "__init__.py").exists()


def _existing(module: str) -> str:
    """``module``, or the longest prefix of it that is a module (an attribute import)."""
    while not _exists(module) and "." in module:
        module = module.rsplit(".", 1)[0]
    return module


def _floor(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    return FLOORS[top]


GRAPH = {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_part_of_the_package_has_a_floor():
    tops = {m.split(".")[1] for m in GRAPH if "." in m}
    assert tops <= set(FLOORS), f"parts without a floor in this test: {sorted(tops - set(FLOORS))}"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module):
    up = sorted(m for m in GRAPH[module] if _floor(m) > _floor(module))
    assert not up, f"{module} (floor {_floor(module)}) imports from above: {up}"


def test_no_import_circles():
    """Depth-first search over the whole import graph."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for n in sorted(GRAPH.get(m, ())):
            if state.get(n) == 1:
                cycle = path[path.index(n) :] + [n]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_the_tests_have_one_conftest():
    # Test modules write `from conftest import ...`: a second conftest.py in a
    # subfolder would be imported under the same name and shadow the first.
    tests = Path(__file__).resolve().parent
    assert [p.relative_to(tests).as_posix() for p in tests.rglob("conftest.py")] == ["conftest.py"]
