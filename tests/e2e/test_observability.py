"""The admin listener: Prometheus metrics, health, readiness, status and the config dump."""

from __future__ import annotations

import time

import httpx

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.dataplane.app import GatewayApp
from mcp_oauth_gateway.resources import load_paths

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}


def test_metrics_health_and_config(stack_b):
    headers = {"Accept": "application/json, text/event-stream"}
    httpx.post(stack_b.mcp, json=INIT, headers={**headers,
                                                "Authorization": f"Bearer {stack_b.token()}"})
    httpx.post(stack_b.mcp, json=INIT, headers={
        **headers, "Authorization": f"Bearer {stack_b.token(exp=int(time.time()) - 3600)}"})
    admin = stack_b.status.rstrip("/")
    metrics = httpx.get(f"{admin}/metrics").text
    assert 'mcp_gateway_requests_total{decision="allowed",route="default/mcp",status="200"}' \
        in metrics
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
    app = GatewayApp(ControlPlane(snapshot), status_port=9901)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1:9901") as client:
        ready = await client.get("/readyz")
        status = (await client.get("/status")).json()
    assert ready.status_code == 503
    assert "not yet fetched" in ready.json()["waitingFor"][0]
    conditions = {c["type"]: c["reason"] for c in status["policies"][0]["conditions"]}
    assert conditions["ResolvedRefs"] == "KeysetUnavailable"
