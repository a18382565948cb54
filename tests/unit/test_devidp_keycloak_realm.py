"""The Keycloak flavour's realm settings and logout-all answer as Keycloak 26.7 does (probed on
the real server: PUT 204, Jackson's 400s, `logout-all` 200 `{}`, tokens from before it 401)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.devidp.keycloak_realm import read_update
from mcp_oauth_gateway.provider_kinds import ProviderKind

KC = "http://127.0.0.1:8180"
TOKEN = "/realms/master/protocol/openid-connect/token"
REALM = "/admin/realms/master"


def admin_token(http: TestClient) -> dict:
    response = http.post(
        TOKEN,
        data={
            "grant_type": "password",
            "client_id": "admin-cli",
            "username": "admin",
            "password": "pw",
        },
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def http():
    app = create_app(DevIdpSettings(kind=ProviderKind.KEYCLOAK, admin_password="pw"))
    with TestClient(app, base_url=KC, follow_redirects=False) as client:
        yield client


def bearer(token: dict) -> dict[str, str]:
    return {"Authorization": f"Bearer {token['access_token']}"}


def test_the_realm_representation_reads_and_updates(http):
    auth = bearer(admin_token(http))
    realm = http.get(REALM, headers=auth).json()
    assert (realm["realm"], realm["accessTokenLifespan"], realm["notBefore"]) == ("master", 60, 0)
    put = http.put(REALM, headers=auth, json={**realm, "accessTokenLifespan": 2})
    assert (put.status_code, put.content) == (204, b"")
    assert http.get(REALM, headers=auth).json()["accessTokenLifespan"] == 2
    # Every token issued afterwards lives 2 s, admin-cli's included.
    assert admin_token(http)["expires_in"] == 2


def test_a_null_field_is_left_as_it_is_and_numbers_are_read_as_jackson_reads_them(http):
    auth = bearer(admin_token(http))
    assert http.put(REALM, headers=auth, json={"accessTokenLifespan": None}).status_code == 204
    assert http.get(REALM, headers=auth).json()["accessTokenLifespan"] == 60
    assert read_update(b'{"accessTokenLifespan": 7.5}') == {"accessTokenLifespan": 7}
    assert read_update(b'{"accessTokenLifespan": "30"}') == {"accessTokenLifespan": 30}


@pytest.mark.parametrize(
    ("body", "status", "answer"),
    [
        (
            b"not json",
            400,
            {"error": "invalid_request", "error_description": "Cannot parse the JSON"},
        ),
        (b"[1]", 400, {"error": "unknown_error", "error_description": "Cannot parse the JSON"}),
        (
            b'{"accessTokenLifespan": "x"}',
            400,
            {"error": "unknown_error", "error_description": "Cannot parse the JSON"},
        ),
        (b'{"realm": "other"}', 400, {"errorMessage": "Can't rename master realm"}),
    ],
)
def test_a_realm_update_keycloak_cannot_read_is_refused_as_keycloak_refuses_it(
    http, body, status, answer
):
    auth = {**bearer(admin_token(http)), "Content-Type": "application/json"}
    response = http.put(REALM, headers=auth, content=body)
    assert (response.status_code, response.json()) == (status, answer)


def test_logout_all_ends_every_session_issued_before_it(http):
    before = admin_token(http)
    assert http.get(f"{REALM}/groups", headers=bearer(before)).status_code == 200
    ended = http.post(f"{REALM}/logout-all", headers=bearer(admin_token(http)))
    assert (ended.status_code, ended.json()) == (200, {})
    refused = http.get(f"{REALM}/groups", headers=bearer(before))
    assert (refused.status_code, refused.json()) == (401, {"error": "HTTP 401 Unauthorized"})
    refreshed = http.post(
        TOKEN,
        data={
            "grant_type": "refresh_token",
            "client_id": "admin-cli",
            "refresh_token": before["refresh_token"],
        },
    )
    assert (refreshed.status_code, refreshed.json()) == (
        400,
        {"error": "invalid_grant", "error_description": "Session not active"},
    )
    after = admin_token(http)
    assert http.get(f"{REALM}/groups", headers=bearer(after)).status_code == 200
    assert http.get(REALM, headers=bearer(after)).json()["notBefore"] > 0


def test_the_realm_needs_an_admin_token(http):
    assert http.get(REALM).status_code == 401
    assert http.put(REALM, json={}).status_code == 401
    assert http.post(f"{REALM}/logout-all").status_code == 401
