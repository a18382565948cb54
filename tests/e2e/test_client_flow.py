"""A real MCP client (TypeScript SDK 1.x) completes the whole OAuth flow through the gateway in
the spec's facade layout, against an independent OpenID provider."""

from __future__ import annotations

from node_clients import run_ts_client
from support import backend_requests, unverified_claims


def test_ts_client_full_flow_provider_b(stack_b):
    report = run_ts_client(stack_b.mcp, "alice")
    assert report["ok"], report
    # registration shim answered with the pre-registered public client
    assert report["clientId"] == "mcp-public"
    assert report["authorizationUrl"].startswith(f"{stack_b.idp}/application/o/mcp/authorize/")
    assert "resource=" in report["authorizationUrl"]
    claims = unverified_claims(report["accessToken"])
    assert claims["aud"] == "mcp-public"
    assert claims["iss"] == stack_b.issuer
    assert report["tools"] == ["add", "count"]
    assert report["add"]["structuredContent"] == {"result": 5}
    assert report["count"]["content"][0]["text"] == "counted to 3"
    assert report["progress"] == [1, 2, 3], "progress notifications must stream over SSE"
    assert report["sessionId"]
    assert report["terminated"]


def test_ts_client_session_wire_reaches_backend_untouched(stack_b):
    report = run_ts_client(stack_b.mcp, "alice")
    assert report["ok"], report
    seen = [
        r
        for r in backend_requests(stack_b.backend)
        if dict(r["headers"]).get("mcp-session-id") == report["sessionId"]
    ]
    methods = {r["method"] for r in seen}
    assert {"POST", "GET", "DELETE"} <= methods, methods
    for request in seen:
        headers = dict(request["headers"])
        assert "authorization" not in headers, "the bearer token must not reach the backend"
        assert headers["mcp-protocol-version"]


def test_ts_client_full_flow_provider_a(stack_a):
    report = run_ts_client(stack_a.mcp, "alice")
    assert report["ok"], report
    # Keycloak has DCR: the gateway forwarded registration, so the id is the provider's own
    assert report["clientId"]
    assert report["clientId"] != "mcp-public"
    claims = unverified_claims(report["accessToken"])
    assert claims["aud"] == stack_a.mcp
    assert claims["iss"] == stack_a.issuer
    assert report["add"]["structuredContent"] == {"result": 5}
    assert report["progress"] == [1, 2, 3]


def test_user_without_group_is_forbidden(stack_b):
    report = run_ts_client(stack_b.mcp, "bob")
    assert not report["ok"]
    assert report["status"] == 403, report
    assert '"error":"forbidden"' in report["error"]
