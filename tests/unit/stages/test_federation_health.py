"""Each federated target's health as the admin listener shows it: up or down as last seen, the
last failure and when, failures counted by reason, on `/status` under the route rule and in the
metrics; a target that answers (even with a refusal, or without a list it does not offer) is up,
and one that comes back is up again with its count kept."""

from __future__ import annotations

import re

import orjson

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.proxy.federation.health import Health
from mcp_oauth_gateway.proxy.federation.target import ErrorAnswer, Refused, TimedOut
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from unit.resources_fixture import BASE, write

from .federation_targets import INIT, Targets, rpc
from .harness import drive

ONE = "    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]\n"
TWO = (
    "    targets: [{name: a, static: {host: 127.0.0.1, port: 9001}},"
    " {name: b, static: {host: 127.0.0.1, port: 9002}}]\n"
)
ADMIN = 9901


def gateway(tmp_path, targets: Targets) -> GatewayApp:
    """The fixture route over two in-memory targets, with an admin listener."""
    snapshot = build_snapshot(load_paths([write(tmp_path, BASE.replace(ONE, TWO))]))
    return GatewayApp(ControlPlane(snapshot), ServeOptions(status_port=ADMIN), targets)


async def admin(app: GatewayApp, path: str) -> bytes:
    response = await drive(app, "GET", path, scope={"server": ("127.0.0.1", ADMIN)})
    assert response.status == 200
    return response.body


async def health(app: GatewayApp) -> dict[str, dict[str, object]]:
    status = orjson.loads(await admin(app, "/status"))
    targets: dict[str, dict[str, object]] = status["federation"]["default/mcp"]["0"]["targets"]
    return targets


async def post(app: GatewayApp, body: bytes, session: bytes | None = None) -> dict[str, object]:
    headers = [(b"mcp-session-id", session)] if session else []
    response = await drive(app, "POST", headers=headers, body=body)
    assert response.status == 200, response.body
    if session is None:
        found = response.header(b"mcp-session-id")
        assert found is not None
        return {"session": found}
    message: dict[str, object] = response.json()
    return message


async def test_a_target_down_shows_down_with_its_failures_and_comes_back_up(tmp_path):
    targets = Targets(down={"b"})
    app = gateway(tmp_path, targets)
    before = await health(app)
    assert before["a"]["up"] is None
    assert before["b"]["failures"] == {}
    session = (await post(app, INIT))["session"]
    assert isinstance(session, bytes)
    await post(app, rpc("tools/list"), session)
    seen = await health(app)
    assert seen["a"]["up"] is True
    assert seen["a"]["failures"] == {}
    assert seen["a"]["lastError"] is None
    assert seen["a"]["lastOkAt"] is not None
    b = seen["b"]
    assert b["up"] is False
    assert b["failures"] == {"unreachable": 2}  # initialize, then the list
    assert b["lastError"] == "it is unreachable"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(b["lastErrorAt"]))
    assert b["address"] == "http://127.0.0.1:9002/mcp"
    metrics = (await admin(app, "/metrics")).decode()
    labels = 'route="default/mcp",rule="0",target="b"'
    assert f"mcp_gateway_federation_target_up{{{labels}}} 0.0" in metrics
    failed = 'reason="unreachable",route="default/mcp",rule="0",target="b"'
    assert f"mcp_gateway_federation_target_failures_total{{{failed}}} 2.0" in metrics
    assert 'mcp_gateway_federation_target_up{route="default/mcp",rule="0",target="a"} 1.0' in (
        metrics
    )
    targets.down.clear()
    await post(app, rpc("tools/list"), session)
    back = (await health(app))["b"]
    assert back["up"] is True
    assert back["failures"] == {"unreachable": 2}
    assert back["lastError"] == "it is unreachable"  # the last failure stays shown
    metrics = (await admin(app, "/metrics")).decode()
    assert f"mcp_gateway_federation_target_up{{{labels}}} 1.0" in metrics


async def test_a_call_that_fails_counts_against_its_target_only(tmp_path):
    targets = Targets()
    app = gateway(tmp_path, targets)
    session = (await post(app, INIT))["session"]
    assert isinstance(session, bytes)
    targets.down.add("a")
    answer = await post(app, rpc("tools/call", 2, name="a_t1"), session)
    assert answer["error"]["code"] == -32603  # type: ignore[index]
    seen = await health(app)
    assert (seen["a"]["up"], seen["a"]["failures"]) == (False, {"unreachable": 1})
    assert (seen["b"]["up"], seen["b"]["failures"]) == (True, {})


def test_what_the_target_answered_leaves_it_up():
    health = Health()
    health.failed("a", TimedOut("it did not answer within 1s"))
    assert (health.of("a").up, health.of("a").failures) == (False, {"timeout": 1})
    # It answered: refusing the request itself, or with an error for a list it does not offer.
    health.failed("a", Refused(403))
    assert (health.of("a").up, health.of("a").failures) == (True, {"timeout": 1, "refused": 1})
    health.failed("a", ErrorAnswer("it answered prompts/list with an error"))
    assert health.of("a").failures == {"timeout": 1, "refused": 1}
    assert health.of("a").last_error == "it answered HTTP 403"


async def test_no_federated_route_shows_an_empty_map(tmp_path):
    snapshot = build_snapshot(load_paths([write(tmp_path, BASE)]))
    app = GatewayApp(ControlPlane(snapshot), ServeOptions(status_port=ADMIN))
    status = orjson.loads(await admin(app, "/status"))
    assert status["federation"] == {}
    assert b"mcp_gateway_federation_target_up{" not in await admin(app, "/metrics")
