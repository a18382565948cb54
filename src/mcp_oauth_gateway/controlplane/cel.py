"""CEL rules compiled once at load, with type checking, and evaluated strictly.

cel-expr-python returns a runtime error (a missing claim, a non-bool result) as a truthy value,
so a rule holds only when its result `is True`.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from cel_expr_python import cel

_MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
# The strings extension gives `join`, `split`, `lowerAscii`… (e.g. `jwt.groups.join(",")`).
_CONFIG = cel.NewEnvConfigFromYaml(
    "name: mcp-oauth-gateway\nextensions:\n  - name: strings\n    version: latest\n"
)
_ENV = cel.NewEnv(config=_CONFIG, variables={"jwt": _MAP, "request": _MAP})
# Tool-level rules also see the MCP item being listed or called.
_MCP_ENV = cel.NewEnv(config=_CONFIG, variables={"jwt": _MAP, "request": _MAP, "mcp": _MAP})


class CelCompileError(ValueError):
    """An expression does not compile; the message carries the position and a caret line."""


_CLAIM = re.compile(r"\bjwt\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*[\"']([^\"']+)[\"']\s*\])")
_JWT = re.compile(r"\bjwt\b")


@dataclass(frozen=True, slots=True, weakref_slot=True)
class CompiledExpression:
    source: str
    program: cel.Expression
    uses_request: bool
    # The claims the expression reads (None: it uses `jwt` as a whole, so it gets every claim).
    claims: frozenset[str] | None = None


def referenced_claims(source: str) -> frozenset[str] | None:
    """Claim names read as `jwt.name` or `jwt["name"]`; None if `jwt` is used otherwise."""
    names = {a or b for a, b in _CLAIM.findall(source)}
    if len(_JWT.findall(source)) != len(_CLAIM.findall(source)):
        return None
    return frozenset(names)


def claims_read(expressions: Iterable[CompiledExpression]) -> frozenset[str] | None:
    """Every claim the expressions read by name; None when one reads `jwt` as a whole."""
    names: set[str] = set()
    for expression in expressions:
        if expression.claims is None:
            return None
        names |= expression.claims
    return frozenset(names)


def visible_claims(claims: dict[str, object], read: frozenset[str] | None) -> dict[str, object]:
    """What CEL is given as `jwt`: only the claims read (converting a whole token's claims to
    CEL values costs more than most evaluations)."""
    if read is None:
        return claims
    return {name: claims[name] for name in read if name in claims}


# Compiled expressions (~5 KB each, outside Python's heap) by source and environment, for as
# long as a configuration holds them: a reload finds every rule of the running configuration
# compiled, and a rule no configuration uses any more is freed with the last one that did. (A
# cache of the last N sources seen kept each edit's rules, so memory grew with every change.)
_COMPILED: weakref.WeakValueDictionary[tuple[str, bool], CompiledExpression] = (
    weakref.WeakValueDictionary()
)


def compile_expression(source: str, mcp: bool = False) -> CompiledExpression:
    """Parse and type-check `source` against `jwt` and `request` (and `mcp` when asked). The
    result depends only on the two (the environments are fixed), so it is compiled once while
    any configuration (the running one, the one being built) holds it."""
    key = (source, mcp)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = _compiled(source, mcp)
    return compiled


def _compiled(source: str, mcp: bool) -> CompiledExpression:
    try:
        program = (_MCP_ENV if mcp else _ENV).compile(source)
    except RuntimeError as exc:
        text = str(exc).removeprefix("INVALID_ARGUMENT: ").replace(" [INVALID_ARGUMENT]", "")
        raise CelCompileError(text.strip()) from exc
    # A textual check is conservative: at worst the request map is built when not needed.
    return CompiledExpression(
        source=source,
        program=program,
        uses_request="request" in source,
        claims=referenced_claims(source),
    )


def value_of(expression: CompiledExpression, activation: dict[str, object]) -> object:
    """The expression's value, or None when evaluation fails (a missing claim, a bad type)."""
    try:
        result = expression.program.eval(data=activation)
    except (RuntimeError, TypeError, ValueError):
        return None
    if result.type() == cel.Type.ERROR:
        return None
    return result.value()


def outcome(expression: CompiledExpression, activation: dict[str, object]) -> bool | None:
    """True or False when the expression evaluates to a boolean, None when it errors."""
    try:
        value = expression.program.eval(data=activation).value()
    except (RuntimeError, TypeError, ValueError):
        return None
    return value if isinstance(value, bool) else None


def holds(expression: CompiledExpression, activation: dict[str, object]) -> bool:
    """True only when the expression evaluates to the boolean true; errors count as false."""
    try:
        return expression.program.eval(data=activation).value() is True
    except (RuntimeError, TypeError, ValueError):
        return False
