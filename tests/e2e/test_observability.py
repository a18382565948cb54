"""The admin listener: Prometheus metrics, health, readiness, status and the config dump, on
loopback unless told otherwise; and the health listener, answering a pod's probes and nothing
else."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from conftest import _start_stack
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from support import free_port, wait_until

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def test_metrics_health_and_config(stack_b):
    headers = {"Accept": "application/json, text/event-stream"}
    httpx.post(
        stack_b.mcp, json=INIT, headers={**headers, "Authorization": f"Bearer {stack_b.token()}"}
    )
    httpx.post(
        stack_b.mcp,
        json=INIT,
        headers={
            **headers,
            "Authorization": f"Bearer {stack_b.token(exp=int(time.time()) - 3600)}",
        },
    )
    admin = stack_b.status.rstrip("/")
    # A request is counted once its response is sent: the scrape could come first.
    allowed = 'mcp_gateway_requests_total{decision="allowed",route="default/mcp",status="200"}'
    wait_until(
        lambda: allowed in httpx.get(f"{admin}/metrics").text,
        30,
        "the allowed request to be counted",
    )
    metrics = httpx.get(f"{admin}/metrics").text
    assert 'mcp_gateway_authentication_failures_total{reason="expired"}' in metrics
    assert "mcp_gateway_upstream_latency_seconds_bucket" in metrics
    assert 'mcp_gateway_jwks_age_seconds{url="' in metrics
    assert httpx.get(f"{admin}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{admin}/readyz")
    assert ready.status_code == 200
    assert ready.json()["ready"] is True
    config = httpx.get(f"{admin}/config").json()
    policy = config["policies"]["default/mcp-authn"]
    assert policy["issuer"] == stack_b.issuer
    assert policy["mcp"]["clientId"] == "mcp-public"
    assert policy["authorization"]["rules"] == ['"mcp-agent" in jwt.groups']


async def test_not_ready_until_every_keyset_is_loaded(tmp_path):
    from unit.resources_fixture import BASE, policy, write

    snapshot = build_snapshot(load_paths([write(tmp_path, BASE + policy())]))
    app = GatewayApp(ControlPlane(snapshot), ServeOptions(status_port=9901))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:9901"
    ) as client:
        ready = await client.get("/readyz")
        status = (await client.get("/status")).json()
    assert ready.status_code == 503
    assert "not yet fetched" in ready.json()["waitingFor"][0]
    conditions = {c["type"]: c["reason"] for c in status["policies"][0]["conditions"]}
    assert conditions["ResolvedRefs"] == "KeysetUnavailable"


def test_the_health_listener_answers_the_probes_only_and_the_admin_listener_is_loopback(
    logs, tmp_path_factory, idp_key, backend
):
    health = free_port()
    tmp = tmp_path_factory.mktemp("health-listener")
    # The health listener on another loopback address: the pod's address, as far as a test goes.
    wide = ("--health-port", str(health), "--health-host", "127.0.0.2")
    for stack in _start_stack(
        "authentik", "provider-b", "9000", logs, tmp, idp_key, backend, gateway_args=wide
    ):
        probes = f"http://127.0.0.2:{health}"
        assert httpx.get(f"{probes}/healthz").json() == {"status": "ok"}
        ready = httpx.get(f"{probes}/readyz")
        assert (ready.status_code, ready.json()) == (200, {"ready": True})
        for path in ("/config", "/status", "/metrics", "/", "/mcp"):
            refused = httpx.get(f"{probes}{path}")
            assert refused.status_code == 404, path
            assert refused.json()["error"] == "not_found"
            assert "/healthz and /readyz only" in refused.json()["error_description"]
        # The admin listener (--status-port, no --admin-host) is on 127.0.0.1 alone.
        admin = stack.status.rstrip("/")
        assert admin.startswith("http://127.0.0.1:")
        assert httpx.get(f"{admin}/config").status_code == 200
        elsewhere = admin.replace("127.0.0.1", "127.0.0.2")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{elsewhere}/config")


def _json_lines(text: str) -> list[dict[str, object]]:
    # Every line must parse: a text line in JSON mode would break log shippers.
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_logs_carry_a_request_id_end_to_end(stack_json):
    headers = {"Accept": "application/json, text/event-stream"}
    given = httpx.post(
        stack_json.mcp,
        json=INIT,
        headers={
            **headers,
            "X-Request-Id": "trace-abc.1",
            "Authorization": f"Bearer {stack_json.token()}",
        },
    )
    assert given.status_code == 200
    assert given.headers["x-request-id"] == "trace-abc.1"
    expired = stack_json.token(exp=int(time.time()) - 3600)
    made = httpx.post(
        stack_json.mcp,
        json=INIT,
        headers={**headers, "X-Request-Id": "x" * 200, "Authorization": f"Bearer {expired}"},
    )
    assert made.status_code == 401
    new_id = made.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", new_id)

    seen = [
        dict(r["headers"]).get("x-request-id")
        for r in httpx.get(f"http://{stack_json.backend}/debug/requests").json()
    ]
    assert "trace-abc.1" in seen

    def logged(request_id: str) -> bool:
        # The access log is written in batches by a background thread.
        return any(
            line.get("request_id") == request_id and line["logger"] == "mcp_oauth_gateway.access"
            # Whole lines only: a batch may be half written when read.
            for line in _json_lines(stack_json.process.log().rpartition("\n")[0])
        )

    wait_until(
        lambda: logged("trace-abc.1") and logged(new_id),
        what="both requests' access lines in the log",
    )
    lines = _json_lines(stack_json.process.log())
    access = {
        line["request_id"]: line for line in lines if line["logger"] == "mcp_oauth_gateway.access"
    }
    assert access["trace-abc.1"]["status"] == 200
    assert access["trace-abc.1"]["sub"] == "alice"
    assert access[new_id]["status"] == 401
    assert access[new_id]["path"] == "/mcp"
    assert any(line["message"].startswith("listening on") for line in lines)
    log_text = stack_json.process.log()
    assert expired not in log_text
    assert "x" * 200 not in log_text


def test_tracing_continues_the_callers_trace_and_hands_it_to_the_backend(
    stack_traced, otlp_receiver
):
    trace_id, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    response = httpx.post(
        stack_traced.mcp,
        json=INIT,
        headers={
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {stack_traced.token()}",
            "traceparent": f"00-{trace_id}-{caller_span}-01",
        },
    )
    assert response.status_code == 200

    def gateway_span():
        spans = httpx.get(f"{otlp_receiver}/spans").json()
        return next((s for s in spans if s["trace_id"] == trace_id), None)

    wait_until(lambda: gateway_span() is not None, what="the gateway's span at the receiver")
    span = gateway_span()
    assert span["service"] == "mcp-oauth-gateway"
    assert span["parent_span_id"] == caller_span
    assert span["attributes"]["http.response.status_code"] == 200
    assert span["attributes"]["http.route"] == "default/mcp"
    forwarded = [
        dict(r["headers"]).get("traceparent")
        for r in httpx.get(f"http://{stack_traced.backend}/debug/requests").json()
    ]
    # The backend's parent is the gateway's span, not the caller's.
    assert f"00-{trace_id}-{span['span_id']}-01" in forwarded
