"""Sessions in the Keycloak flavour as Keycloak 26.7 keeps them (probed on the real server):
refresh tokens good again and again unless the realm's revokeRefreshToken is on, a refresh's
scope held to the client's scopes, an admin logout of a user, and token revocation."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.provider_kinds import ProviderKind

KC = "http://127.0.0.1:8180"
OIDC = "/realms/master/protocol/openid-connect"
ADMIN = "/admin/realms/master"


@pytest.fixture
def kc():
    app = create_app(DevIdpSettings(kind=ProviderKind.KEYCLOAK, admin_password="pw"))
    with TestClient(app, base_url=KC, follow_redirects=False) as http:
        yield http


def sign_in(http: TestClient, scope: str = "openid") -> dict:
    answer = http.post(
        f"{OIDC}/token",
        data={
            "grant_type": "password",
            "client_id": "admin-cli",
            "username": "admin",
            "password": "pw",
            "scope": scope,
        },
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def refresh(http: TestClient, token: str, **extra: str):
    data = {"grant_type": "refresh_token", "client_id": "admin-cli", "refresh_token": token}
    return http.post(f"{OIDC}/token", data={**data, **extra})


def userinfo(http: TestClient, tokens: dict) -> int:
    bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
    return http.get(f"{OIDC}/userinfo", headers=bearer).status_code


def answer(response) -> tuple[int, dict]:
    return response.status_code, response.json()


def test_a_refresh_token_is_good_again_and_again_by_default(kc):
    tokens = sign_in(kc)
    assert refresh(kc, tokens["refresh_token"]).status_code == 200
    assert refresh(kc, tokens["refresh_token"]).status_code == 200


def test_with_revoke_refresh_token_a_reuse_ends_the_clients_session(kc):
    admin = {"Authorization": f"Bearer {sign_in(kc)['access_token']}"}
    assert kc.put(ADMIN, headers=admin, json={"revokeRefreshToken": True}).status_code == 204
    first = sign_in(kc)
    second = refresh(kc, first["refresh_token"]).json()
    assert answer(refresh(kc, first["refresh_token"])) == (
        400,
        {
            "error": "invalid_grant",
            "error_description": "Maximum allowed refresh token reuse exceeded",
        },
    )
    assert answer(refresh(kc, second["refresh_token"])) == (
        400,
        {"error": "invalid_grant", "error_description": "Session doesn't have required client"},
    )


def test_a_refresh_scope_the_client_lacks_is_refused_and_the_token_stays_good(kc):
    tokens = sign_in(kc)
    for scope in ("openid unheard-of", ""):
        assert answer(refresh(kc, tokens["refresh_token"], scope=scope)) == (
            400,
            {"error": "invalid_scope", "error_description": f"Invalid scopes: {scope}"},
        )
    assert refresh(kc, tokens["refresh_token"], scope="openid profile").status_code == 200


def test_an_admin_logout_of_a_user_ends_every_session(kc):
    tokens = sign_in(kc)
    admin = {"Authorization": f"Bearer {tokens['access_token']}"}
    me = kc.get(f"{ADMIN}/users", headers=admin, params={"username": "admin"}).json()[0]["id"]
    fresh = {"Authorization": f"Bearer {sign_in(kc)['access_token']}"}
    assert kc.post(f"{ADMIN}/users/{me}/logout", headers=fresh).status_code == 204
    assert answer(refresh(kc, tokens["refresh_token"])) == (
        400,
        {"error": "invalid_grant", "error_description": "Session not active"},
    )
    assert userinfo(kc, tokens) == 401
    again = {"Authorization": f"Bearer {sign_in(kc)['access_token']}"}
    assert answer(kc.post(f"{ADMIN}/users/nope/logout", headers=again)) == (
        404,
        {"error": "User not found"},
    )


def test_revocation(kc):
    revoke = f"{OIDC}/revoke"
    by_refresh, by_access = sign_in(kc), sign_in(kc)
    done = kc.post(revoke, data={"client_id": "admin-cli", "token": by_refresh["refresh_token"]})
    assert (done.status_code, done.content) == (200, b"")
    assert refresh(kc, by_refresh["refresh_token"]).json()["error_description"] == (
        "Session not active"
    )
    assert userinfo(kc, by_refresh) == 401
    assert (
        kc.post(
            revoke, data={"client_id": "admin-cli", "token": by_access["access_token"]}
        ).status_code
        == 200
    )
    assert userinfo(kc, by_access) == 401
    assert refresh(kc, by_access["refresh_token"]).status_code == 200
    assert answer(kc.post(revoke, data={"client_id": "admin-cli", "token": "garbage"})) == (
        200,
        {"error": "invalid_token", "error_description": "Invalid token"},
    )
    assert answer(kc.post(revoke, data={"client_id": "admin-cli"})) == (
        400,
        {"error": "invalid_request", "error_description": "Token not provided"},
    )
    assert kc.post(revoke, data={"client_id": "nope", "token": "x"}).status_code == 401
    discovery = kc.get("/realms/master/.well-known/openid-configuration").json()
    assert discovery["revocation_endpoint"] == f"{KC}{revoke}"
