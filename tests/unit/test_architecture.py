"""The shape of the code, kept: no function over 60 lines in src/ (the layers and the absence of
import cycles are import-linter contracts in pyproject.toml, run by `make lint`)."""

from __future__ import annotations

import ast

from support import ROOT

MAX_FUNCTION_LINES = 60


def test_no_function_is_longer_than_60_lines():
    long = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert long == [], "split these into named steps: " + ", ".join(long)
