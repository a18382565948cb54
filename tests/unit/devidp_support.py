"""The dev IdP in process: its Keycloak flavour as `idp keycloak --allow-anonymous-dcr` leaves
it, test clients of either flavour, a browser's code flow, and the gateway's token check."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

from starlette.testclient import TestClient

from contracts import Recorder
from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.dataplane.tokens import TokenRules, verify_token
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.providers.access_tokens import access_token_rule

KC = "http://127.0.0.1:8180"
AK = "http://127.0.0.1:9000"
REDIRECT = "http://127.0.0.1:5555/callback"
ADMIN = "/admin/realms/master"
TOKEN = "/realms/master/protocol/openid-connect/token"


@contextmanager
def open_keycloak() -> Iterator[tuple[TestClient, dict[str, str]]]:
    """(client, the admin's Authorization header) of a dev IdP (admin password `pw`) whose
    trusted-hosts registration policies are gone, so clients register anonymously."""
    app = create_app(DevIdpSettings(kind=ProviderKind.KEYCLOAK, admin_password="pw"))
    with TestClient(app, base_url=KC, follow_redirects=False) as http:
        grant = {"grant_type": "password", "client_id": "admin-cli"}
        answer = http.post(TOKEN, data={**grant, "username": "admin", "password": "pw"})
        admin = {"Authorization": f"Bearer {answer.json()['access_token']}"}
        for policy in http.get(f"{ADMIN}/components", headers=admin).json():
            if policy["providerId"] == "trusted-hosts":
                http.delete(f"{ADMIN}/components/{policy['id']}", headers=admin)
        yield http, admin


def make(app, base: str, recorder: Recorder | None = None) -> TestClient:
    http = TestClient(app, base_url=base, follow_redirects=False)
    if recorder is not None:
        http.event_hooks = recorder.hooks()
    return http


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign_in(
    http: TestClient,
    authorize: str,
    client_id: str,
    username: str,
    password: str,
    scope: str = "openid profile",
) -> tuple[dict[str, list[str]], str]:
    """Run the browser part of the code flow; returns the callback query and the verifier."""
    verifier, challenge = pkce()
    response = http.get(
        authorize,
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "scope": scope,
            "state": "st-1",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        },
    )
    for _ in range(8):
        assert response.status_code in (302, 303), response.text
        location = response.headers["location"]
        if location.startswith(REDIRECT):
            return parse_qs(urlsplit(location).query), verifier
        page = http.get(location)
        if page.status_code in (302, 303):
            response = page
            continue
        form = (
            {"prompt": "login", "login": username, "password": password}
            if 'value="login"' in page.text
            else {"prompt": "consent"}
        )
        response = http.post(location, data=form)
    raise AssertionError("the sign-in did not reach the redirect URI")


def redeem(http: TestClient, token_path: str, client_id: str, code: str, verifier: str):
    """The token endpoint's answer to an authorization-code grant."""
    return http.post(
        token_path,
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )


def gateway_verify(
    token: str, jwks: dict, issuer: str, provider: str, audience: str | None = None
) -> dict:
    """What the gateway's authentication stage does with this token (rule by provider)."""
    rules = TokenRules(
        issuer=issuer,
        audiences=frozenset({audience}) if audience else None,
        access_token=access_token_rule(provider),
    )
    return verify_token(token, parse_jwks(jwks, version=1), rules, time.time())
