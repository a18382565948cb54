"""Each target's own timeout (`spec.mcp.targets[].timeout`): what the loader takes and refuses,
a slow target failing within its own while the others keep the route's, a reload that changes
only a timeout keeping the sessions, and a single target's timeout for the reverse proxy."""

from __future__ import annotations

import asyncio

import pytest

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget
from mcp_oauth_gateway.proxy.federation.stage import FederationState
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.process_state import ProcessState
from unit.resources_fixture import BASE, write

from .federation_targets import PORTS, Targets, open_session, rpc, stage
from .harness import MemoryUpstream, drive

ONE = "    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]\n"
# The route's timeout is long: a target held to it would hang the test (bounded below).
ROUTE = 3600.0
GUARD = 30.0


def with_targets(targets: str) -> str:
    return BASE.replace(ONE, f"    targets: {targets}\n")


def test_a_targets_timeout_is_compiled_and_others_have_none(tmp_path):
    text = with_targets(
        "[{name: a, static: {host: 127.0.0.1, port: 9}, timeout: 1m30s},"
        " {name: b, static: {host: 127.0.0.1, port: 10}, timeout: 250ms},"
        " {name: c, static: {host: 127.0.0.1, port: 11}}]"
    )
    route = build_snapshot(load_paths([write(tmp_path, text)])).listeners[8080][0]
    assert [(t.name, t.timeout) for t in route.targets] == [("a", 90.0), ("b", 0.25), ("c", None)]


@pytest.mark.parametrize(
    ("timeout", "why"),
    [("0s", "more than zero"), ("soon", "is not a duration"), ("''", "at least 1 character")],
)
def test_a_bad_timeout_is_refused_naming_the_field(tmp_path, timeout, why):
    text = with_targets(f"[{{name: a, static: {{host: h, port: 1}}, timeout: {timeout}}}]")
    errors = "\n".join(load_paths([write(tmp_path, text)]).errors)
    assert ": spec.mcp.targets[0].timeout: " in errors, errors
    assert why in errors, errors


async def test_a_slow_target_fails_within_its_own_timeout_and_the_others_keep_the_routes():
    targets = Targets()
    app = stage(targets, timeout=ROUTE, own={"b": 0.05})
    headers = await open_session(app)
    targets.slow.add("b")
    async with asyncio.timeout(GUARD):
        listed = await drive(app, "POST", headers=headers, body=rpc("tools/list"))
        called = await drive(app, "POST", headers=headers, body=rpc("tools/call", 4, name="b_u1"))
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["a_t1", "a_t2"]
    error = called.json()["error"]
    assert error["code"] == -32603
    assert (
        "'b' behind this route is unavailable: it did not answer within 0.05s" in (error["message"])
    )
    assert {within for name, within in targets.within if name == "a"} == {ROUTE}
    assert {within for name, within in targets.within if name == "b"} == {0.05}
    assert app.health.of("b").failures == {"timeout": 2}
    assert app.health.of("a").up is True


def test_a_reload_changing_only_a_timeout_keeps_the_sessions():
    process_state = ProcessState()
    targets = tuple(CompiledTarget("127.0.0.1", port, "/mcp", n) for port, n in PORTS.items())
    state = process_state.federation("default/mcp", 0, targets)
    timed = (CompiledTarget("127.0.0.1", 9001, "/mcp", "a", 2.0), targets[1])
    assert process_state.federation("default/mcp", 0, timed) is state


async def test_sessions_made_before_a_reload_get_the_new_timeout():
    targets = Targets()
    state = FederationState()
    headers = await open_session(stage(targets, timeout=ROUTE, state=state))
    after = stage(targets, timeout=ROUTE, own={"a": 7.0}, state=state)
    await drive(after, "POST", headers=headers, body=rpc("tools/list"))
    assert targets.within[-2:] in ([("a", 7.0), ("b", ROUTE)], [("b", ROUTE), ("a", 7.0)])


async def test_a_single_targets_timeout_bounds_the_reverse_proxy(tmp_path):
    text = with_targets("[{name: t, static: {host: 127.0.0.1, port: 9}, timeout: 12s}]")
    upstream = MemoryUpstream()
    snapshot = build_snapshot(load_paths([write(tmp_path, text)]))
    app = GatewayApp(ControlPlane(snapshot), upstream=upstream)
    await drive(app, "POST", body=b"{}", headers=[(b"mcp-session-id", b"s")])
    assert upstream.last.headers_within == 12.0
    plain = MemoryUpstream()
    unset = build_snapshot(load_paths([write(tmp_path, BASE)]))
    await drive(GatewayApp(ControlPlane(unset), upstream=plain), "POST", body=b"{}")
    assert plain.last.headers_within == 300.0  # the route's default, as before
