"""A reload never answers without a token a request that needs one today
(`controlplane/protection.py`): a policy dropped from a rule, or a protected route removed
while a route without a policy would take its path, is a problem the watcher refuses; other
changes are not. The lookup it uses is held to the plain first-match walk (route_reference)."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import watch
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.controlplane.protection import _Served, lost_protection
from mcp_oauth_gateway.controlplane.snapshot import CompiledPolicy, CompiledRoute, Snapshot
from mcp_oauth_gateway.controlplane.watch import reload_problems
from unit.fuzz_settings import FUZZ
from unit.route_reference import first_match
from unit.route_strategies import REQUEST_HOSTS, paths, routes

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
    assert "restart the gateway" in problem
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


@FUZZ
@given(routes(), REQUEST_HOSTS.filter(lambda h: h and ":" not in h), st.lists(paths(), max_size=5))
def test_the_lookup_chooses_the_first_matching_route(routes, host, requests):
    served = _Served(routes)
    for path in requests:
        expected = first_match(routes, host, path)
        found = served.first(host, path)
        assert found is (routes[expected] if expected is not None else None), (host, path)


async def test_a_file_still_changing_is_read_only_once_it_has_settled(monkeypatch):
    # Fingerprints as the watcher sees them: at start, then a write caught half-way (the
    # second look differs), then the finished file on two looks in a row.
    seen = [("start",), ("truncated",), ("written",)]
    monkeypatch.setattr(
        watch, "fingerprint", lambda paths: seen.pop(0) if len(seen) > 1 else seen[0]
    )
    watcher = watch.ConfigWatcher([], ControlPlane(snapshot()), interval=0)
    loaded: list[object] = []
    done = asyncio.Event()

    async def reload() -> bool:
        loaded.append(watcher._seen)
        done.set()
        return True

    monkeypatch.setattr(watcher, "reload", reload)
    watcher.start()
    await asyncio.wait_for(done.wait(), 10)
    await watcher.stop()
    assert loaded == [("written",)]
