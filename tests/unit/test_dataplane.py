"""The data plane in process (no network): CORS, fail-closed answers, metadata documents."""

from __future__ import annotations

import httpx
import pytest

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from support import claims_for, unsigned

from .resources_fixture import BASE, policy, write
from .tokens_support import ALL_DPOP_ALGS

ORIGIN = "http://inspector.local:6274"


def client_for(tmp_path, text: str) -> httpx.AsyncClient:
    app = GatewayApp(ControlPlane(build_snapshot(load_paths([write(tmp_path, text)]))))
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw.example:8080"
    )


async def test_preflight_is_answered_before_authentication(tmp_path):
    async with client_for(tmp_path, BASE + policy()) as client:
        response = await client.options(
            "/mcp",
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ORIGIN  # echoed: credentials
    assert response.headers["access-control-allow-credentials"] == "true"
    assert response.headers["access-control-allow-methods"] == "POST"
    # DPoP: a browser client may send its proof (the route's policy takes DPoP tokens).
    assert response.headers["access-control-allow-headers"] == (
        "Origin, Authorization, Content-Type, DPoP"
    )
    assert response.headers["access-control-max-age"] == "86400"


async def test_cors_headers_on_401_and_fail_closed_before_keyset(tmp_path):
    # A token the keys might accept waits for them (503, retry: not the client's fault, and a
    # 401 would send it to sign in again); one that is wrong anyway is 401 at once.
    plausible = unsigned(
        {"alg": "RS256", "kid": "k1"}, claims_for("http://idp/application/o/mcp/", "mcp-public")
    )
    async with client_for(tmp_path, BASE + policy()) as client:
        waiting = await client.post(
            "/mcp", json={}, headers={"Origin": ORIGIN, "Authorization": f"Bearer {plausible}"}
        )
        refused = await client.post(
            "/mcp", json={}, headers={"Origin": ORIGIN, "Authorization": "Bearer a.b.c"}
        )
    assert waiting.status_code == 503
    assert waiting.headers["retry-after"] == "1"
    assert waiting.json()["error"] == "temporarily_unavailable"
    assert "not yet available" in waiting.json()["error_description"]
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    for response in (waiting, refused):
        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert response.headers["access-control-expose-headers"] == (
            "Origin, Mcp-Session-Id, WWW-Authenticate, DPoP-Nonce"
        )


async def test_protected_resource_metadata_document(tmp_path):
    async with client_for(tmp_path, BASE + policy()) as client:
        response = await client.get("/.well-known/oauth-protected-resource/mcp")
    assert response.status_code == 200
    assert response.json() == {
        "resource": "http://gw.example/mcp",
        "authorization_servers": ["http://gw.example:8080/mcp"],
        "mcp_protocol_version": "2025-06-18",
        "resource_type": "mcp-server",
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["openid", "profile"],
        "dpop_signing_alg_values_supported": ALL_DPOP_ALGS,
        "dpop_bound_access_tokens_required": False,
    }


async def test_as_metadata_502_when_discovery_was_never_fetched(tmp_path):
    async with client_for(tmp_path, BASE + policy()) as client:
        response = await client.get("/.well-known/oauth-authorization-server/mcp")
    assert response.status_code == 502
    assert "discovery document could not be fetched" in response.json()["error_description"]


@pytest.mark.parametrize(
    "path", ["/mcp", "/.well-known/oauth-authorization-server/mcp/client-registration"]
)
async def test_invalid_policy_fails_closed_with_503(tmp_path, path):
    async with client_for(tmp_path, BASE + policy(client_id=None)) as client:
        response = await client.post(path, json={"redirect_uris": ["http://127.0.0.1/cb"]})
    assert response.status_code == 503
    body = response.json()
    assert body["error"] == "policy_invalid"
    assert "mcp.clientId is required" in body["error_description"]


async def test_unrouted_path_is_404_json(tmp_path):
    async with client_for(tmp_path, BASE + policy()) as client:
        response = await client.get("/elsewhere")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


async def test_disallowed_origin_gets_no_cors_headers(tmp_path):
    text = BASE.replace('allowOrigins: ["*"]', "allowOrigins: [https://app.example]")
    async with client_for(tmp_path, text + policy()) as client:
        simple = await client.post("/mcp", json={}, headers={"Origin": "https://evil.example"})
        preflight = await client.options(
            "/mcp",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
    assert "access-control-allow-origin" not in simple.headers
    assert preflight.status_code == 403


@pytest.mark.parametrize(
    ("trust", "expected"),
    [
        (True, "https://mcp.example.com/mcp"),
        (False, "http://gw.example:8080/mcp"),
    ],
)
async def test_forwarded_headers_only_when_trusted(tmp_path, trust, expected):
    snapshot = build_snapshot(load_paths([write(tmp_path, BASE + policy())]))
    app = GatewayApp(ControlPlane(snapshot), ServeOptions(trust_forwarded=trust))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw.example:8080") as client:
        response = await client.get(
            "/.well-known/oauth-protected-resource/mcp",
            headers={"X-Forwarded-Proto": "https", "X-Forwarded-Host": "mcp.example.com"},
        )
        challenge = (
            await client.post(
                "/mcp",
                headers={"X-Forwarded-Proto": "https", "X-Forwarded-Host": "mcp.example.com"},
            )
        ).headers
    assert response.json()["authorization_servers"] == [expected]
    assert f'resource_metadata="{expected.removesuffix("/mcp")}' in challenge["www-authenticate"]


def test_cel_rules_read_only_the_claims_they_name():
    from mcp_oauth_gateway.controlplane.cel import referenced_claims

    assert referenced_claims('"users" in jwt.groups') == {"groups"}
    assert referenced_claims('jwt.sub == "a" && jwt["email"].endsWith("x")') == {"sub", "email"}
    assert referenced_claims("size(jwt) > 0") is None  # the whole map: every claim is fed


def test_cel_sees_every_copy_of_a_repeated_header():
    from mcp_oauth_gateway.dataplane.authz import header_map

    assert header_map([(b"x-tenant", b"a"), (b"accept", b"*/*"), (b"x-tenant", b"b")]) == {
        "x-tenant": "a, b",
        "accept": "*/*",
    }
