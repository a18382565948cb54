"""Broker mode: the gateway is the authorization server clients see. Strict clients (Python
`mcp` 2.x) complete the flow; every attack on the flow is refused with a clear OAuth error."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from headless_login import sign_in

from broker_calls import CALLBACK, authorize_url, metadata_documents, redeem, register
from node_clients import run_ts_client
from support import PEERS, unverified_claims


async def signed_in_code(stack, client_id: str, redirect: str = CALLBACK) -> dict[str, str]:
    return await sign_in(authorize_url(stack, client_id, redirect), "alice", "x", redirect)


def test_metadata_is_the_gateways_own(broker_b):
    prm = httpx.get(f"{broker_b.gateway}/.well-known/oauth-protected-resource/mcp").json()
    asm = httpx.get(f"{broker_b.gateway}/.well-known/oauth-authorization-server/mcp").json()
    assert asm["issuer"] == prm["authorization_servers"][0] == f"{broker_b.gateway}/mcp"
    assert asm["authorization_endpoint"] == f"{broker_b.gateway}/mcp/oauth/authorize"
    assert asm["code_challenge_methods_supported"] == ["S256"]
    assert asm["authorization_response_iss_parameter_supported"] is True
    assert asm["client_id_metadata_document_supported"] is True
    assert asm["response_types_supported"] == ["code"]


def test_python_sdk_2_signs_in_through_the_broker(broker_b):
    done = subprocess.run(
        [sys.executable, str(PEERS / "py_client.py"), broker_b.mcp, "alice", "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ok"], report
    assert report["result"] == "5"
    assert report["authorize"] == f"{broker_b.gateway}/mcp/oauth/authorize"


def test_typescript_sdk_signs_in_through_the_broker(broker_b):
    report = run_ts_client(broker_b.mcp, "alice")
    assert report["ok"], report
    assert report["callback"]["iss"] == f"{broker_b.gateway}/mcp"
    assert report["progress"] == [1, 2, 3]


async def test_full_flow_gives_the_providers_token_unchanged(broker_b):
    client_id = register(broker_b)
    query = await signed_in_code(broker_b, client_id)
    assert query["state"] == "client-state-1"
    assert query["iss"] == f"{broker_b.gateway}/mcp"
    tokens = redeem(broker_b, client_id, query["code"])
    assert tokens.status_code == 200, tokens.text
    assert tokens.headers["cache-control"] == "no-store"
    claims = unverified_claims(tokens.json()["access_token"])
    assert claims["iss"] == broker_b.issuer  # the provider's token, not re-minted
    assert claims["aud"] == "mcp-public"
    call = httpx.post(
        broker_b.mcp,
        headers={
            "Authorization": f"Bearer {tokens.json()['access_token']}",
            "Accept": "application/json, text/event-stream",
        },
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    assert call.status_code == 200


async def test_replayed_code_is_refused(broker_b):
    client_id = register(broker_b)
    query = await signed_in_code(broker_b, client_id)
    assert redeem(broker_b, client_id, query["code"]).status_code == 200
    replay = redeem(broker_b, client_id, query["code"])
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert "already used" in replay.json()["error_description"]


async def test_wrong_pkce_verifier_is_refused(broker_b):
    client_id = register(broker_b)
    query = await signed_in_code(broker_b, client_id)
    wrong = redeem(broker_b, client_id, query["code"], verifier="w" * 64)
    assert wrong.status_code == 400
    assert wrong.json() == {
        "error": "invalid_grant",
        "error_description": "PKCE verification failed (code_verifier does not match the "
        "code_challenge)",
    }


async def test_code_bound_to_client_and_redirect(broker_b):
    client_id, other = register(broker_b), register(broker_b, "http://127.0.0.1:47002/cb")
    query = await signed_in_code(broker_b, client_id)
    stolen = redeem(broker_b, other, query["code"])
    assert stolen.json()["error"] == "invalid_grant"


def test_redirect_uri_mismatch_is_refused_without_redirecting(broker_b):
    client_id = register(broker_b)
    response = httpx.get(authorize_url(broker_b, client_id, "https://evil.example/cb"))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert "is not registered for this client" in response.json()["error_description"]
    assert "location" not in response.headers


def test_loopback_redirect_may_change_port(broker_b):
    client_id = register(broker_b)
    response = httpx.get(authorize_url(broker_b, client_id, "http://127.0.0.1:59999/cb"))
    assert response.status_code == 200
    assert "Attack Lab" in response.text
    assert "127.0.0.1:59999" in response.text  # the consent page names the redirect host


def test_pkce_is_required(broker_b):
    client_id = register(broker_b)
    url = authorize_url(broker_b, client_id).replace(
        "code_challenge_method=S256", "code_challenge_method=plain"
    )
    response = httpx.get(url)
    assert response.status_code == 302
    query = parse_qs(urlsplit(response.headers["location"]).query)
    assert query["error"] == ["invalid_request"]
    assert query["state"] == ["client-state-1"]
    assert query["iss"] == [f"{broker_b.gateway}/mcp"]


def test_forged_state_is_refused(broker_b):
    response = httpx.get(
        f"{broker_b.gateway}/mcp/oauth/callback",
        params={"code": "x", "state": "forged", "iss": broker_b.issuer},
    )
    assert response.status_code == 400
    assert "unknown, expired or already used state" in response.json()["error_description"]


def test_unknown_or_tampered_client_is_refused(broker_b):
    client_id = register(broker_b)
    tampered = client_id[:-3] + ("AAA" if not client_id.endswith("AAA") else "BBB")
    response = httpx.get(authorize_url(broker_b, tampered))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client"


def test_consent_from_another_browser_is_refused(broker_b):
    client_id = register(broker_b)
    with httpx.Client() as victim:
        page = victim.get(authorize_url(broker_b, client_id))
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
    # The attacker replays the consent form without the victim's browser cookie.
    forged = httpx.post(
        f"{broker_b.gateway}/mcp/oauth/authorize",
        data={"request": request_id, "decision": "allow"},
        headers={"Origin": broker_b.gateway},
    )
    assert forged.status_code == 400
    assert "not given in the browser" in forged.json()["error_description"]


async def test_denied_consent_returns_access_denied(broker_b):
    client_id = register(broker_b)
    query = await sign_in(
        authorize_url(broker_b, client_id), "alice", "x", CALLBACK, decision="deny"
    )
    assert query["error"] == "access_denied"
    assert query["state"] == "client-state-1"


@pytest.fixture
def metadata_server():
    with metadata_documents() as served:
        yield served


def test_client_metadata_documents(broker_b, metadata_server):
    base, documents = metadata_server
    good = f"{base}/clients/inspector.json"
    documents["/clients/inspector.json"] = {
        "client_id": good,
        "client_name": "Inspector CIMD",
        "redirect_uris": [CALLBACK],
    }
    page = httpx.get(authorize_url(broker_b, good))
    assert page.status_code == 200
    assert "Inspector CIMD" in page.text
    liar = f"{base}/clients/liar.json"
    documents["/clients/liar.json"] = {
        "client_id": "https://someone-else.example/c.json",
        "redirect_uris": [CALLBACK],
    }
    refused = httpx.get(authorize_url(broker_b, liar))
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_client"
    assert "not its own URL" in refused.json()["error_description"]
    missing = httpx.get(authorize_url(broker_b, f"{base}/clients/none.json"))
    assert "answered HTTP 404" in missing.json()["error_description"]


def test_provider_iss_mismatch_on_callback_is_refused(broker_b):
    client_id = register(broker_b)
    with httpx.Client() as browser:
        page = browser.get(authorize_url(broker_b, client_id))
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        to_idp = browser.post(
            f"{broker_b.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow"},
            headers={"Origin": broker_b.gateway},
        )
    upstream_state = parse_qs(urlsplit(to_idp.headers["location"]).query)["state"][0]
    mixed_up = httpx.get(
        f"{broker_b.gateway}/mcp/oauth/callback",
        params={"code": "x", "state": upstream_state, "iss": "https://attacker.example/"},
    )
    assert mixed_up.status_code == 400
    assert "RFC 9207" in mixed_up.json()["error_description"]
