"""Only access tokens get through: an ID token signed by the provider's key, with the expected iss
and aud, is refused with 401 and the reason, by the rule for each provider (docs/access-tokens.md).
And a second Authorization header never reaches the backend."""

from __future__ import annotations

import secrets

import httpx
import pytest

from support import claims_for, mint

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "token-kinds-test", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}
# Keycloak and authentik put `typ: JWT` in the header of every token they sign (no RFC 9068).
JWT_HEADER = {"typ": "JWT"}


def post_mcp(stack, headers: list[tuple[str, str]]) -> httpx.Response:
    return httpx.post(stack.mcp, json=INITIALIZE, headers=[*ACCEPT.items(), *headers], timeout=10)


def provider_token(stack, header: dict | None = None, **claims: object) -> str:
    """Signed by the stack's IdP key, with its iss and aud: only the kind can be wrong."""
    return mint(
        stack.key, claims_for(stack.issuer, stack.audience, **claims), header=header or JWT_HEADER
    )


def assert_refused(response: httpx.Response, reason: str) -> None:
    assert response.status_code == 401, response.text
    body = response.json()
    assert body["error"] == "invalid_token"
    assert body["error_description"].startswith(reason), body
    assert "send the access_token from the token response" in body["error_description"]
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="this is ')


KEYCLOAK_REFUSED = {
    "ID token": (
        {"typ": "ID", "azp": "mcp-public"},
        "this is an ID token (typ claim 'ID'), not an access token",
    ),
    "refresh token": (
        {"typ": "Refresh", "azp": "mcp-public"},
        "this is a refresh token (typ claim 'Refresh')",
    ),
}


@pytest.mark.parametrize("case", list(KEYCLOAK_REFUSED))
def test_keycloak_non_access_token_is_refused_with_reason(stack_a, case):
    claims, reason = KEYCLOAK_REFUSED[case]
    token = provider_token(stack_a, **claims)
    assert_refused(post_mcp(stack_a, [("Authorization", f"Bearer {token}")]), reason)


def test_keycloak_access_token_shape_gets_through(stack_a):
    token = provider_token(stack_a, typ="Bearer", azp="mcp-public")
    response = post_mcp(stack_a, [("Authorization", f"Bearer {token}")])
    assert response.status_code == 200, response.text


def test_authentik_id_token_is_refused_with_reason(stack_b):
    # the attack as found: aud = client id on both kinds, so iss/aud/signature all match
    token = provider_token(stack_b, nonce="n-1", auth_time=1)
    assert_refused(
        post_mcp(stack_b, [("Authorization", f"Bearer {token}")]),
        "this is an ID token (it has no uid and azp claim",
    )


def test_authentik_access_token_shape_gets_through(stack_b):
    token = provider_token(stack_b, azp="mcp-public", uid=secrets.token_hex(16), nonce="n-1")
    response = post_mcp(stack_b, [("Authorization", f"Bearer {token}")])
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("stack_name", ["stack_a", "stack_b"])
def test_rfc9068_header_gets_through_on_both_layouts(request, stack_name):
    stack = request.getfixturevalue(stack_name)
    token = provider_token(stack, header={"typ": "at+jwt"})  # no typ claim, no uid/azp
    assert post_mcp(stack, [("Authorization", f"Bearer {token}")]).status_code == 200
