"""CEL rules compiled once at load, with type checking, and evaluated strictly.

cel-expr-python returns a runtime error (a missing claim, a non-bool result) as a truthy value,
so a rule holds only when its result `is True`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cel_expr_python import cel

_MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
_ENV = cel.NewEnv(variables={"jwt": _MAP, "request": _MAP})


class CelCompileError(ValueError):
    """An expression does not compile; the message carries the position and a caret line."""


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    source: str
    program: cel.Expression
    uses_request: bool


def compile_expression(source: str) -> CompiledExpression:
    """Parse and type-check `source` against the `jwt` and `request` variables."""
    try:
        program = _ENV.compile(source)
    except RuntimeError as exc:
        text = str(exc).removeprefix("INVALID_ARGUMENT: ").replace(" [INVALID_ARGUMENT]", "")
        raise CelCompileError(text.strip()) from exc
    # A textual check is conservative: at worst the request map is built when not needed.
    return CompiledExpression(source=source, program=program, uses_request="request" in source)


def holds(expression: CompiledExpression, activation: dict[str, object]) -> bool:
    """True only when the expression evaluates to the boolean true; errors count as false."""
    try:
        return expression.program.eval(data=activation).value() is True
    except (RuntimeError, TypeError, ValueError):
        return False
