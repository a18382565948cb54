"""Token revocation (RFC 7009) at the Broker, with oidc-provider behind it: a client revokes the
tokens it holds, never another client's; the refresh token's grant is revoked at the provider
(seen in the provider's log), and the provider's refusal to revoke a JWT access token is passed
on as it said it."""

from __future__ import annotations

from pathlib import Path

import httpx
from headless_login import sign_in

from broker_calls import authorize_url, redeem, register
from support import wait_until


async def tokens_for(stack, client_id: str) -> dict[str, str]:
    url = authorize_url(stack, client_id, scope="openid profile offline_access")
    query = await sign_in(url, "alice", "x", "http://127.0.0.1:47001/cb")
    response = redeem(stack, client_id, query["code"])
    assert response.status_code == 200, response.text
    tokens = response.json()
    assert "refresh_token" in tokens
    return tokens


def revoke(stack, **form: str) -> httpx.Response:
    return httpx.post(f"{stack.gateway}/mcp/oauth/revoke", data=form)


def refresh(stack, client_id: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{stack.gateway}/mcp/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id},
    )


def test_the_revocation_endpoint_is_advertised(broker_b):
    metadata = httpx.get(f"{broker_b.gateway}/.well-known/oauth-authorization-server/mcp").json()
    assert metadata["revocation_endpoint"] == f"{broker_b.gateway}/mcp/oauth/revoke"
    assert metadata["revocation_endpoint_auth_methods_supported"] == ["none"]


async def test_a_refresh_token_is_revoked_only_by_its_client_and_at_the_provider(
    broker_b, logs: Path
):
    owner, other = register(broker_b), register(broker_b)
    tokens = await tokens_for(broker_b, owner)
    stolen = revoke(broker_b, token=tokens["refresh_token"], client_id=other)
    assert stolen.status_code == 400
    assert stolen.json()["error_description"] == "the token was issued to another client"
    log = logs / "idp-authentik.log"
    before = log.read_text().count("revoked grant")
    done = revoke(
        broker_b, token=tokens["refresh_token"], token_type_hint="refresh_token", client_id=owner
    )
    assert done.status_code == 200, done.text
    wait_until(
        lambda: log.read_text().count("revoked grant") > before,
        10,
        "the provider to revoke the grant",
    )
    refused = refresh(broker_b, owner, tokens["refresh_token"])
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"


async def test_the_providers_refusal_to_revoke_a_jwt_access_token_is_passed_on(broker_b):
    owner = register(broker_b)
    tokens = await tokens_for(broker_b, owner)
    other = revoke(broker_b, token=tokens["access_token"], client_id=register(broker_b))
    assert other.status_code == 400
    # oidc-provider cannot revoke structured (JWT) access tokens, and says so.
    answer = revoke(broker_b, token=tokens["access_token"], client_id=owner)
    assert answer.status_code == 400
    assert answer.json()["error"] == "unsupported_token_type"
    assert answer.json()["error_description"].startswith(
        "the identity provider refused the revocation"
    )


def test_unknown_tokens_and_bad_requests(broker_b):
    client_id = register(broker_b)
    assert revoke(broker_b, token="never-issued", client_id=client_id).status_code == 200
    missing_client = revoke(broker_b, token="x")
    assert (missing_client.status_code, missing_client.json()["error"]) == (400, "invalid_client")
    missing_token = revoke(broker_b, client_id=client_id)
    assert (missing_token.status_code, missing_token.json()["error"]) == (400, "invalid_request")
    bad_hint = revoke(broker_b, token="x", client_id=client_id, token_type_hint="id_token")
    assert bad_hint.json()["error"] == "unsupported_token_type"
    assert httpx.get(f"{broker_b.gateway}/mcp/oauth/revoke").status_code == 405
