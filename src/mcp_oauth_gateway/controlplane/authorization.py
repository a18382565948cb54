"""Compile a CEL `authorization` block (the policy's, its tool rules', a workload issuer's)."""

from __future__ import annotations

from ..resources.models import Authorization
from .cel import CelCompileError, compile_expression
from .snapshot import CompiledAuthorization


def compile_authorization(
    spec: Authorization | None, path: str, problems: list[str], mcp: bool = False
) -> CompiledAuthorization | None:
    """Compile an `Authorization` block, adding one problem per expression that does not."""
    if spec is None:
        return None
    expressions = []
    for i, source in enumerate(spec.policy.match_expressions):
        try:
            expressions.append(compile_expression(source, mcp=mcp))
        except CelCompileError as exc:
            problems.append(f"{path}.policy.matchExpressions[{i}]: invalid CEL: {exc}")
    return CompiledAuthorization(spec.action, tuple(expressions))
