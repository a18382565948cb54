"""Whether an edited rule set can let through a request the running one refuses: the decisions
behind "a reload never widens access" for CEL authorization rules and required scopes.

CEL expressions are compared by their source. The same source is the same test (compiled once,
in the same environment); two different sources are taken as unrelated, because whether one
implies the other cannot be decided in general. An edit is accepted only when it is narrower
whatever each expression evaluates to (true, false, or an error), so a changed expression is
never accepted: a restart applies it.

Scopes are exact: a token's scopes, with what `implies` adds, are compared as sets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .snapshot import CompiledAuthorization, CompiledScopeRule, CompiledScopes

ROUTE_SCOPES = "spec.traffic.scopes"
ITEM_SCOPES = "spec.backend.mcp.scopes"


@dataclass(frozen=True, slots=True)
class Rules:
    """An authorization block as the comparison sees it: its action and its rules' sources."""

    action: str
    sources: frozenset[str]

    @classmethod
    def of(cls, authorization: CompiledAuthorization | None) -> Rules | None:
        """The block's action and sources (None: no block, every caller passes)."""
        if authorization is None:
            return None
        return cls(authorization.action, frozenset(e.source for e in authorization.expressions))


def _shown(sources: Iterable[str]) -> str:
    return ", ".join(f"`{source}`" for source in sorted(sources))


def _lets_everyone_in(rules: Rules | None) -> bool:
    # Require and Deny with no rules hold for every request; Allow with none for no request.
    return rules is None or (rules.action != "Allow" and not rules.sources)


def _same_action(old: Rules, new: Rules) -> str | None:
    """Allow may lose alternatives; Require and Deny may gain rules."""
    if old.action == "Allow":
        added = new.sources - old.sources
        return f"Allow rule {_shown(added)} added or changed" if added else None
    removed = old.sources - new.sources
    if not removed:
        return None
    return f"{old.action} rule {_shown(removed)} removed or changed"


def _other_action(old: Rules, new: Rules) -> str | None:
    """Allow → Require keeps out what no shared rule lets in; Require of one rule → Allow of
    that rule is the same test. Every other change of action can let a request through."""
    if old.action == "Allow" and new.action == "Require" and old.sources & new.sources:
        return None
    same_test = new.sources <= old.sources and len(old.sources) == 1
    if old.action == "Require" and new.action == "Allow" and same_test:
        return None
    return f"action {old.action} → {new.action} with rules {_shown(new.sources)}"


def rules_widening(old: CompiledAuthorization | None, new: CompiledAuthorization | None) -> str:
    """Why `new` may let through a request `old` refuses ("" when it provably cannot)."""
    before, after = Rules.of(old), Rules.of(new)
    if _lets_everyone_in(before):
        return ""
    assert before is not None
    if after is not None and after.action == "Allow" and not after.sources:
        return ""  # no Allow rule: nobody passes
    if _lets_everyone_in(after):
        return "removed (every request would pass)" if after is None else "no rules left"
    assert after is not None
    why = (
        _same_action(before, after)
        if before.action == after.action
        else _other_action(before, after)
    )
    return why or ""


# --- scopes -----------------------------------------------------------------------------------


def granters(scope: str, implies: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Every granted scope that satisfies a need for `scope`: itself and those implying it."""
    return frozenset({scope, *(g for g, implied in implies.items() if scope in implied)})


def _covered(
    scope: str,
    old: Mapping[str, frozenset[str]],
    needs: Iterable[str],
    new: Mapping[str, frozenset[str]],
) -> bool:
    """Some scope in `needs` is granted (under `new`) only by scopes that grant `scope` under
    `old`: a token meeting that need would have met the old need for `scope`."""
    before = granters(scope, old)
    return any(granters(need, new) <= before for need in needs)


def _lost(scope: str, old: Mapping[str, frozenset[str]], new: Mapping[str, frozenset[str]]) -> str:
    """Why a need for `scope` is no longer met as strictly: gone, or granted by more scopes."""
    more = granters(scope, new) - granters(scope, old)
    if more:
        return f"{', '.join(sorted(more))} would also grant {scope} (implies)"
    return f"{scope} is no longer required"


@dataclass(frozen=True, slots=True)
class _Scopes:
    required: tuple[str, ...]
    implies: Mapping[str, frozenset[str]]
    items: tuple[CompiledScopeRule, ...]

    @classmethod
    def of(cls, scopes: CompiledScopes | None) -> _Scopes:
        if scopes is None:
            return cls((), {}, ())
        return cls(scopes.required, scopes.implies, scopes.items)


def _item_covered(
    rule: CompiledScopeRule, kind: str, scope: str, old: _Scopes, new: _Scopes
) -> bool:
    """A call of a `kind` item that `rule` asks `scope` for still needs as much: through the
    route's scopes, or a rule with the same match (which fires exactly when `rule` does)."""
    if _covered(scope, old.implies, new.required, new.implies):
        return True
    same = (
        r.required for r in new.items if r.match.source == rule.match.source and kind in r.kinds
    )
    return any(_covered(scope, old.implies, needs, new.implies) for needs in same)


def scopes_widening(
    old: CompiledScopes | None, new: CompiledScopes | None
) -> list[tuple[str, str]]:
    """Each need of `old` that `new` meets with fewer scopes, as (field, why); empty when every
    token `new` accepts for a request `old` accepts too."""
    before, after = _Scopes.of(old), _Scopes.of(new)
    found: list[tuple[str, str]] = []
    for scope in before.required:
        if not _covered(scope, before.implies, after.required, after.implies):
            found.append((ROUTE_SCOPES, _lost(scope, before.implies, after.implies)))
    for rule in before.items:
        for kind in sorted(rule.kinds):
            for scope in rule.required:
                if not _item_covered(rule, kind, scope, before, after):
                    why = _lost(scope, before.implies, after.implies)
                    found.append((ITEM_SCOPES, f"rule `{rule.match.source}` ({kind}s): {why}"))
    return list(dict.fromkeys(found))
