"""Which edits of CEL rules and required scopes a reload may apply (`controlplane/narrowing.py`):
exactly those under which every request the new rules let through, the running ones let
through too, whatever each expression evaluates to. Held to the data plane's own decisions
(`authz.decide`, `RequiredScopes`, `McpAuthorization.needed_scopes`) over every outcome of
every expression and every set of granted scopes."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.asgi import CLAIMS_KEY
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.narrowing import rules_widening, scopes_widening
from mcp_oauth_gateway.controlplane.scopes import implied_closure, rule_kinds
from mcp_oauth_gateway.controlplane.snapshot import (
    CompiledAuthorization,
    CompiledScopeRule,
    CompiledScopes,
)
from mcp_oauth_gateway.dataplane.authz import decide
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization
from mcp_oauth_gateway.dataplane.scopes import RequiredScopes, granted_scopes, lacking
from unit.fuzz_settings import FUZZ

# Each claim is true, false or absent (the expression then errors): the three outcomes a rule
# can have.
CLAIMS = ("x0", "x1", "x2")
OUTCOMES = (True, False, None)
VALUATIONS = [
    {name: value for name, value in zip(CLAIMS, values, strict=True) if value is not None}
    for values in itertools.product(OUTCOMES, repeat=len(CLAIMS))
]


def block(action: str | None, *claims: str) -> CompiledAuthorization | None:
    if action is None:
        return None
    return CompiledAuthorization(action, tuple(compile_expression(f"jwt.{c}") for c in claims))  # type: ignore[arg-type]


def lets_through(rules: CompiledAuthorization | None, claims: dict[str, object]) -> bool:
    return rules is None or decide(rules, {"jwt": claims})


def never_wider(old, new) -> bool:
    return all(lets_through(old, v) for v in VALUATIONS if lets_through(new, v))


blocks = st.builds(
    lambda action, claims: block(action, *claims),
    st.sampled_from([None, "Allow", "Require", "Deny"]),
    st.lists(st.sampled_from(CLAIMS), unique=True, max_size=3),
)


@FUZZ
@given(blocks, blocks)
def test_an_edit_is_accepted_exactly_when_it_lets_through_nothing_more(old, new):
    assert (rules_widening(old, new) == "") == never_wider(old, new), (old, new)


def test_the_narrowing_edits_are_accepted():
    for old, new in [
        (block("Require", "x0"), block("Require", "x0", "x1")),  # a Require rule added
        (block("Allow", "x0", "x1"), block("Allow", "x0")),  # an Allow alternative removed
        (block("Deny", "x0"), block("Deny", "x0", "x1")),  # a Deny rule added
        (block("Allow", "x0", "x1"), block("Require", "x0", "x2")),  # all of, one shared
        (block("Require", "x0"), block("Allow", "x0")),  # the same test
        (None, block("Deny", "x0")),  # rules where there were none
        (block("Deny", "x0"), block("Allow")),  # nobody passes
    ]:
        assert rules_widening(old, new) == "", (old, new)


def test_a_widening_edit_says_what_lets_more_through():
    cases = [
        (block("Allow", "x0"), None, "removed (every request would pass)"),
        (block("Allow", "x0"), block("Allow", "x0", "x1"), "Allow rule `jwt.x1` added or changed"),
        (block("Allow", "x0"), block("Allow", "x1"), "Allow rule `jwt.x1` added or changed"),
        (block("Require", "x0", "x1"), block("Require", "x0"), "Require rule `jwt.x1` removed"),
        (block("Deny", "x0"), block("Deny", "x1"), "Deny rule `jwt.x0` removed or changed"),
        (block("Require", "x0"), block("Deny", "x0"), "action Require → Deny"),
        (block("Deny", "x0"), block("Require"), "no rules left"),
    ]
    for old, new, why in cases:
        assert why in rules_widening(old, new), (old, new)


def test_a_changed_expression_is_never_accepted_however_alike():
    old = CompiledAuthorization("Allow", (compile_expression('"a" in jwt.groups'),))
    new = CompiledAuthorization("Allow", (compile_expression('"a" in jwt.groups '),))
    assert "added or changed" in rules_widening(old, new)


# --- scopes -----------------------------------------------------------------------------------

SCOPES = ("a", "b", "c")
MATCHES = ("jwt.x0", "jwt.x1", 'mcp.tool.name == "t"', 'mcp.prompt.name == "t"')
ITEMS = [(kind, name) for kind in ("tool", "prompt", "resource") for name in ("t", "u")]
GRANTS = [set(c) for n in range(len(SCOPES) + 1) for c in itertools.combinations(SCOPES, n)]


def scopes(required=(), implies=None, items=()) -> CompiledScopes:
    rules = tuple(
        CompiledScopeRule(compile_expression(m, mcp=True), tuple(r), rule_kinds(m))
        for m, r in items
    )
    return CompiledScopes(tuple(required), implied_closure(implies or {}), rules)


def request(claims: dict[str, object], granted: set[str]) -> dict[str, object]:
    return {CLAIMS_KEY: {**claims, "scope": " ".join(sorted(granted))}}


def route_passes(compiled: CompiledScopes | None, scope: dict[str, object]) -> bool:
    return compiled is None or not RequiredScopes(None, compiled, None).missing(scope)


def item_check(compiled: CompiledScopes | None):
    """Whether a call of an item passes the route's and the item rules' scopes."""
    if compiled is None:
        return lambda scope, kind, name: True
    stage = McpAuthorization(None, None, 1 << 20, compiled)

    def passes(scope: dict[str, object], kind: str, name: str) -> bool:
        held = granted_scopes(scope[CLAIMS_KEY], compiled)  # type: ignore[arg-type]
        needed = stage.needed_scopes(scope, kind, name)
        return route_passes(compiled, scope) and lacking(needed, held) == []

    return passes


scope_sets = st.lists(st.sampled_from(SCOPES), unique=True, max_size=3)
compiled_scopes = st.one_of(
    st.none(),
    st.builds(
        scopes,
        scope_sets,
        st.dictionaries(st.sampled_from(SCOPES), scope_sets, max_size=3),
        st.lists(st.tuples(st.sampled_from(MATCHES), scope_sets), max_size=3),
    ),
)
route_scopes = st.one_of(
    st.none(),
    st.builds(scopes, scope_sets, st.dictionaries(st.sampled_from(SCOPES), scope_sets, max_size=3)),
)


@FUZZ
@given(route_scopes, route_scopes)
def test_route_scopes_are_accepted_exactly_when_no_token_gets_further(old, new):
    requests = [request({}, granted) for granted in GRANTS]
    narrower = all(route_passes(old, r) for r in requests if route_passes(new, r))
    assert (scopes_widening(old, new) == []) == narrower, (old, new)


@FUZZ
@given(compiled_scopes, compiled_scopes)
def test_accepted_item_scopes_let_no_token_call_more(old, new):
    if scopes_widening(old, new):
        return
    before, after = item_check(old), item_check(new)
    for claims, granted, (kind, name) in itertools.product(VALUATIONS[::3], GRANTS, ITEMS):
        scope = request(claims, granted)
        if after(scope, kind, name):
            assert before(scope, kind, name), (claims, granted, kind, name)


def test_the_narrowing_scope_edits_are_accepted():
    for old, new in [
        (scopes(["a"]), scopes(["a", "b"])),  # a required scope added
        (scopes(["a"], {"b": ["a"]}), scopes(["a"])),  # an implication removed
        (scopes(["a"], {"b": ["a"]}), scopes(["b"], {"b": ["a"]})),  # a scope that grants it
        (scopes(items=[("jwt.x0", "a")]), scopes(items=[("jwt.x0", "ab")])),  # item scope added
        (scopes(items=[("jwt.x0", "a")]), scopes(["a"])),  # now needed everywhere
        (None, scopes(items=[("jwt.x1", "c")])),  # a new item rule
    ]:
        assert scopes_widening(old, new) == [], (old, new)


def test_widening_scope_edits_name_the_field_and_the_scope():
    cases = [
        (scopes(["a", "b"]), scopes(["a"]), ("spec.traffic.scopes", "b is no longer required")),
        (
            scopes(["a"]),
            scopes(["a"], {"c": ["a"]}),
            ("spec.traffic.scopes", "c would also grant a (implies)"),
        ),
        (
            scopes(items=[("jwt.x0", "a")]),
            scopes(items=[("jwt.x1", "a")]),
            ("spec.backend.mcp.scopes", "rule `jwt.x0` (prompts): a is no longer required"),
        ),
        (
            scopes(items=[('mcp.tool.name == "t"', "b")]),
            None,
            ("spec.backend.mcp.scopes", 'rule `mcp.tool.name == "t"` (tools): b is no longer'),
        ),
    ]
    for old, new, (field, why) in cases:
        found = scopes_widening(old, new)
        assert any(f == field and why in w for f, w in found), found
