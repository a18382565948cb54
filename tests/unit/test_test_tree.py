"""Tests are a tree of their own: what several test modules share lives in support modules
(tests/*.py, tests/unit/*.py not named test_*), never imported from another test module, so a
test file can be moved, split or deleted without breaking others."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (`test_*`) that `path` imports, as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found += [n for n in names if any(p.startswith("test_") for p in n.split("."))]
    return found


def test_no_test_module_imports_another():
    offenders = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("test_*.py"))
        if "node_modules" not in path.parts and (imported := imported_test_modules(path))
    }
    assert offenders == {}


def test_the_check_sees_each_way_of_importing_one(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text(
        "from .test_a import f\nfrom unit.test_b import g\nimport e2e.test_c\n"
        "from unit import test_d\nfrom support import free_port\n"
    )
    assert imported_test_modules(module) == [
        "test_a",
        "test_a.f",
        "unit.test_b",
        "unit.test_b.g",
        "e2e.test_c",
        "unit.test_d",
    ]
