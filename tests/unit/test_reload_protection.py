"""A reload never answers without a token, or under a wider policy, a request a GatewayPolicy
decides today (`controlplane/protection.py`): a policy dropped from a rule, a protected route
removed or shadowed while a route without a policy (or with a wider one) would take its path,
is a problem the watcher refuses; other changes are not. The lookup it uses is held to the
plain first-match walk (route_reference), and the requests it tries to every request."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import protection
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.protection import _Served, lost_protection
from mcp_oauth_gateway.controlplane.reload_guard import policy_widening
from mcp_oauth_gateway.controlplane.snapshot import (
    CompiledAuthorization,
    CompiledPolicy,
    CompiledRoute,
    Snapshot,
)
from mcp_oauth_gateway.controlplane.watch import reload_problems
from unit.fuzz_settings import FUZZ
from unit.route_reference import first_match
from unit.route_strategies import REQUEST_HOSTS, ROUTE_HOSTS, paths, routes

POLICY = CompiledPolicy("default/auth", (), None, None, False)


def rule(
    name: str,
    value: str,
    policy: CompiledPolicy | None = POLICY,
    hostnames: tuple[str, ...] = (),
    match_type: str = "PathPrefix",
) -> CompiledRoute:
    return CompiledRoute(name, 0, match_type, value, hostnames, None, None, 1.0, policy)  # type: ignore[arg-type]


def snapshot(*routes: CompiledRoute, port: int = 8080) -> Snapshot:
    empty: MappingProxyType[str, object] = MappingProxyType({})
    return Snapshot(MappingProxyType({port: routes}), (), (), empty, empty)  # type: ignore[arg-type]


def test_a_rule_that_loses_its_policy_is_a_problem_naming_path_route_and_policy():
    before = snapshot(rule("default/mcp", "/mcp"))
    after = snapshot(rule("default/mcp", "/mcp", policy=None))
    (problem,) = lost_protection(before, after)
    assert problem.startswith("*/mcp would be served without a token by HTTPRoute default/mcp")
    assert "GatewayPolicy default/auth protects it now" in problem
    assert "restart to apply" in problem
    assert reload_problems(before, after) == [problem]


def test_a_removed_protected_route_whose_path_an_open_route_takes_is_a_problem():
    before = snapshot(rule("default/mcp", "/mcp"), rule("default/site", "/", policy=None))
    after = snapshot(rule("default/site", "/", policy=None))
    (problem,) = lost_protection(before, after)
    assert "by HTTPRoute default/site" in problem


def test_an_open_route_put_before_a_protected_one_on_its_host_is_a_problem():
    before = snapshot(rule("default/mcp", "/mcp", hostnames=("mcp.example.com",)))
    after = snapshot(
        rule("default/new", "/mcp/", policy=None, hostnames=("*.example.com",)),
        rule("default/mcp", "/mcp", hostnames=("mcp.example.com",)),
    )
    (problem,) = lost_protection(before, after)
    assert problem.startswith("mcp.example.com/mcp would be served")


def test_an_open_route_on_a_named_host_takes_a_protected_any_host_path_there():
    before = snapshot(rule("default/mcp", "/mcp"))
    after = snapshot(
        rule("default/open", "/mcp", policy=None, hostnames=("Public.Example.com",)),
        rule("default/mcp", "/mcp"),
    )
    (problem,) = lost_protection(before, after)
    assert problem.startswith("Public.Example.com/mcp would be served")


def test_changes_that_keep_every_protected_path_protected_are_no_problem():
    before = snapshot(rule("default/mcp", "/mcp"), rule("default/site", "/site", policy=None))
    other = CompiledPolicy("default/other", (), None, None, False)
    for after in [
        snapshot(),  # removed: 404, which serves nothing
        snapshot(rule("default/mcp", "/mcp", policy=other)),
        snapshot(rule("default/mcp", "/mcp"), rule("default/x", "/mcpx", policy=None)),
        snapshot(rule("default/mcp", "/mcp"), rule("default/x", "/x/mcp", policy=None)),
        snapshot(rule("default/mcp", "/mcp"), rule("default/x", "/", policy=None)),
        snapshot(
            rule("default/mcp", "/mcp"),
            rule("default/x", "/mcp", policy=None, hostnames=("a.org",)),  # after: never first
        ),
    ]:
        assert lost_protection(before, after) == [], after


def test_an_open_route_taking_part_of_a_removed_protected_one_is_a_problem():
    before = snapshot(rule("default/mcp", "/mcp"))
    for after in [
        snapshot(rule("default/x", "/mcp", policy=None, match_type="Exact")),
        snapshot(rule("default/x", "/mcp", policy=None, hostnames=("a.org",))),
    ]:
        (problem,) = lost_protection(before, after)
        assert "by HTTPRoute default/x" in problem


def test_an_open_route_whose_hostnames_do_not_meet_the_protected_ones_is_no_problem():
    before = snapshot(rule("default/mcp", "/mcp", hostnames=("mcp.example.com",)))
    after = snapshot(
        rule("default/x", "/", policy=None, hostnames=("*.other.org", "example.com")),
        rule("default/mcp", "/mcp", hostnames=("mcp.example.com",)),
    )
    assert lost_protection(before, after) == []


def test_an_open_route_put_under_a_protected_prefix_is_a_problem():
    before = snapshot(rule("default/mcp", "/mcp"))
    after = snapshot(rule("default/x", "/mcp/admin", policy=None), rule("default/mcp", "/mcp"))
    (problem,) = lost_protection(before, after)
    assert problem.startswith("*/mcp/admin would be served without a token by HTTPRoute default/x")


def test_the_paths_under_a_prefix_are_tried_apart_from_the_prefix_itself():
    # `/mcp` itself is open both times; only the paths under it lose their policy.
    before = snapshot(
        rule("default/exact", "/mcp", policy=None, match_type="Exact"), rule("default/mcp", "/mcp")
    )
    after = snapshot(
        rule("default/exact", "/mcp", policy=None, match_type="Exact"),
        rule("default/mcp", "/mcp", policy=None),
    )
    (problem,) = lost_protection(before, after)
    assert problem.startswith("*/mcp/* would be served without a token by HTTPRoute default/mcp")


def test_an_open_route_on_a_name_under_a_protected_wildcard_is_a_problem():
    before = snapshot(rule("default/mcp", "/", hostnames=("*.example.com",)))
    after = snapshot(
        rule("default/x", "/", policy=None, hostnames=("a.example.com",)),
        rule("default/mcp", "/", hostnames=("*.example.com",)),
    )
    (problem,) = lost_protection(before, after)
    assert problem.startswith("a.example.com/ would be served without a token")


STRICT = CompiledPolicy(
    "default/strict",
    (),
    None,
    CompiledAuthorization("Require", (compile_expression("jwt.a"), compile_expression("jwt.b"))),
    False,
)
LOOSE = replace(
    STRICT,
    key="default/loose",
    authorization=CompiledAuthorization("Require", (compile_expression("jwt.a"),)),
)


@st.composite
def reloads(draw: st.DrawFn) -> tuple[list[CompiledRoute], list[CompiledRoute]]:
    """A listener's routes with policies, and an edit of them: rules dropped, added anywhere,
    their policies, paths and hostnames changed."""
    policies = st.sampled_from([None, STRICT, LOOSE])
    before = [replace(r, policy=draw(policies)) for r in draw(routes())]
    after = []
    for route in before:
        change = draw(st.sampled_from(["keep", "keep", "drop", "policy", "path", "hosts"]))
        if change == "policy":
            route = replace(route, policy=draw(policies))
        elif change == "path":
            route = replace(route, match_value=draw(paths()))
        elif change == "hosts":
            route = replace(route, hostnames=tuple(draw(st.lists(ROUTE_HOSTS, max_size=2))))
        if change != "drop":
            after.append(route)
    for extra in draw(routes()):
        after.insert(draw(st.integers(0, len(after))), replace(extra, policy=draw(policies)))
    return before, after


@FUZZ
@given(reloads(), REQUEST_HOSTS, st.lists(paths(), max_size=6))
def test_an_accepted_reload_serves_no_request_more_openly(reload, host, requests):
    before, after = reload
    if lost_protection(snapshot(*before), snapshot(*after)):
        return
    for path in requests:
        was = first_match(before, host, path)
        if was is None or before[was].policy is None:
            continue
        now = first_match(after, host, path)
        if now is None:
            continue
        policy = after[now].policy
        assert policy is not None, (host, path, after[now])
        assert policy_widening(before[was].policy, policy) == [], (host, path)


@FUZZ
@given(routes(), REQUEST_HOSTS.filter(lambda h: h and ":" not in h), st.lists(paths(), max_size=5))
def test_the_lookup_chooses_the_first_matching_route(routes, host, requests):
    served = _Served(routes)
    for path in requests:
        expected = first_match(routes, host, path)
        found = served.first(host, path)
        assert found is (routes[expected] if expected is not None else None), (host, path)


@FUZZ
@given(reloads(), st.booleans())
def test_trying_only_what_changed_rows_reach_finds_what_trying_every_request_finds(
    reload, shuffled
):
    before, after = reload
    if shuffled:
        after = list(reversed(after))  # the rows both have in another order: all tried
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(protection, "FEW_CHANGED", -1)  # every class of request, always
        everything = lost_protection(snapshot(*before), snapshot(*after))
    assert lost_protection(snapshot(*before), snapshot(*after)) == everything


def test_a_reload_that_changes_no_row_tries_no_request():
    rows = (rule("default/a", "/a"), rule("default/open", "/", policy=None))
    assert protection.tried_paths(rows, rows, (("",), ("",))) == []
    changed = (rows[0], replace(rows[1]))
    assert protection.tried_paths(rows, changed, (("",), ("",))) == protection.paths(rows)


def test_unchanged_rows_in_another_order_are_tried():
    protected, everything = rule("default/a", "/a"), rule("default/open", "/", policy=None)
    assert lost_protection(snapshot(protected, everything), snapshot(everything, protected))


def test_a_changed_prefix_is_tried_under_it_too():
    exact = rule("default/exact", "/a", match_type="Exact")
    prefix = rule("default/prefix", "/a")
    opened = replace(prefix, policy=None)
    # `/a` itself is the exact route's, before and after; below it the prefix is opened.
    (problem,) = lost_protection(snapshot(exact, prefix), snapshot(exact, opened))
    assert problem.startswith("*/a/* would be served without a token by HTTPRoute default/prefix")
