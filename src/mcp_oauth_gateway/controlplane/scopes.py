"""Compile a policy's scope requirements: the route's, each MCP item rule's, and the implications
that stand for a provider's scope hierarchy (closed transitively here, once, at load)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from ..resources.models import McpScopeRule, Scopes
from .cel import CelCompileError, compile_expression
from .snapshot import CompiledScopeRule, CompiledScopes

MCP_KINDS = ("tool", "prompt", "resource")
_KIND = re.compile(r"\bmcp\s*\.\s*(tool|prompt|resource)\b")
_MCP = re.compile(r"\bmcp\b")


def implied_closure(implies: Mapping[str, list[str]]) -> Mapping[str, frozenset[str]]:
    """Every scope a granted scope stands for (itself excluded), following implications
    transitively; cycles are harmless."""
    closed: dict[str, frozenset[str]] = {}
    for start in implies:
        seen: set[str] = set()
        todo = list(implies[start])
        while todo:
            scope = todo.pop()
            if scope not in seen:
                seen.add(scope)
                todo.extend(implies.get(scope, ()))
        seen.discard(start)
        closed[start] = frozenset(seen)
    return MappingProxyType(closed)


def rule_kinds(source: str) -> frozenset[str]:
    """The item kinds a match reads (`mcp.tool…` → tool); all of them when it names none or
    uses `mcp` some other way."""
    named = frozenset(_KIND.findall(source))
    if not named or len(_MCP.findall(source)) != len(_KIND.findall(source)):
        return frozenset(MCP_KINDS)
    return named


def compile_item_rules(
    rules: list[McpScopeRule], path: str, problems: list[str]
) -> tuple[CompiledScopeRule, ...]:
    """Compile each item rule's CEL match (with `mcp` in scope)."""
    compiled = []
    for i, rule in enumerate(rules):
        try:
            match = compile_expression(rule.match, mcp=True)
        except CelCompileError as exc:
            problems.append(f"{path}[{i}].match: invalid CEL: {exc}")
            continue
        compiled.append(CompiledScopeRule(match, tuple(rule.required), rule_kinds(rule.match)))
    return tuple(compiled)


def compile_scopes(
    route: Scopes | None, items: list[McpScopeRule], problems: list[str]
) -> CompiledScopes | None:
    """The policy's scope requirements, or None when it has none."""
    if route is None and not items:
        return None
    route = route or Scopes()
    return CompiledScopes(
        required=tuple(dict.fromkeys(route.required)),
        implies=implied_closure(route.implies),
        items=compile_item_rules(items, "spec.backend.mcp.scopes", problems),
    )
