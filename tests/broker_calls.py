"""A test client's Broker-mode OAuth calls over plain HTTP: register, authorize URL, redeem."""

from __future__ import annotations

from urllib.parse import urlencode

import httpx

CALLBACK = "http://127.0.0.1:47001/cb"
VERIFIER = "v" * 64


def s256(verifier: str) -> str:
    import base64
    import hashlib

    return (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    )


def register(stack, redirect: str = CALLBACK) -> str:
    response = httpx.post(
        f"{stack.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
        json={"client_name": "Attack Lab", "redirect_uris": [redirect]},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["redirect_uris"] == [redirect]
    assert body["token_endpoint_auth_method"] == "none"
    return body["client_id"]


def authorize_url(stack, client_id: str, redirect: str = CALLBACK, **extra: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "state": "client-state-1",
        "code_challenge": s256(VERIFIER),
        "code_challenge_method": "S256",
        "scope": "openid profile",
        **extra,
    }
    return f"{stack.gateway}/mcp/oauth/authorize?{urlencode(params)}"


def redeem(
    stack, client_id: str, code: str, verifier: str = VERIFIER, redirect: str = CALLBACK
) -> httpx.Response:
    return httpx.post(
        f"{stack.gateway}/mcp/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": redirect,
            "code_verifier": verifier,
        },
    )
