"""The dev identity provider's Keycloak flavour answers as the real server does
(reference/idp-apis.md), and its OpenID side issues what the provisioning configured. The tests
marked `contracts` check the same exchanges against the OpenAPI document (kept outside the
repository). The authentik flavour: test_devidp_authentik.py."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from contracts import KEYCLOAK, Recorder, validate
from mcp_oauth_gateway.dataplane.tokens import TokenError
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.provider_kinds import ProviderKind
from support import unverified_claims
from unit.devidp_support import KC, REDIRECT, gateway_verify, make, redeem, sign_in


@pytest.fixture
def kc():
    app = create_app(DevIdpSettings(kind=ProviderKind.KEYCLOAK, admin_password="pw"))
    recorder = Recorder()
    with make(app, KC, recorder) as http:
        token = http.post(
            "/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": "pw",
            },
        ).json()
        http.headers["Authorization"] = f"Bearer {token['access_token']}"
        yield http, recorder, token


def test_keycloak_admin_token_is_short_lived(kc):
    _, _, token = kc
    assert token["expires_in"] == 60
    assert token["refresh_expires_in"] == 1800
    assert token["token_type"] == "Bearer"


def _keycloak_creates_and_duplicates(http: TestClient) -> None:
    created = http.post(
        "/admin/realms/master/users",
        json={"username": "Alice", "email": "a@example.com", "enabled": True},
    )
    assert created.status_code == 201
    assert created.content == b""
    assert created.headers["location"].startswith(f"{KC}/admin/realms/master/users/")
    duplicate = http.post("/admin/realms/master/users", json={"username": "alice"})
    assert duplicate.status_code == 409
    assert duplicate.json() == {"errorMessage": "User exists with same username"}
    same_email = http.post(
        "/admin/realms/master/users", json={"username": "x", "email": "a@example.com"}
    )
    assert same_email.json() == {"errorMessage": "User exists with same email"}
    assert http.post("/admin/realms/master/users", json={}).json() == {
        "errorMessage": "User name is missing"
    }
    found = http.get("/admin/realms/master/users", params={"username": "ALICE", "exact": "true"})
    assert [u["username"] for u in found.json()] == ["alice"]
    http.post("/admin/realms/master/groups", json={"name": "users"})
    again = http.post("/admin/realms/master/groups", json={"name": "users"})
    assert again.status_code == 409
    assert again.json() == {"errorMessage": "Top level group named 'users' already exists."}
    scope = {"name": "mcp", "protocol": "openid-connect"}
    assert http.post("/admin/realms/master/client-scopes", json=scope).status_code == 201
    assert http.post("/admin/realms/master/client-scopes", json=scope).json() == {
        "errorMessage": "Client Scope mcp already exists"
    }


def test_keycloak_create_and_duplicate_answers(kc):
    http, _, _ = kc
    _keycloak_creates_and_duplicates(http)


@pytest.mark.contracts
def test_keycloak_create_and_duplicate_exchanges_follow_the_contract(kc):
    http, recorder, _ = kc
    _keycloak_creates_and_duplicates(http)
    problems = [
        p
        for q, r in recorder.exchanges
        if q.url.path.startswith("/admin/")
        for p in validate(str(KEYCLOAK), q, r)
    ]
    assert problems == []


def test_keycloak_admin_auth_errors(server_time):
    app = create_app(DevIdpSettings(kind=ProviderKind.KEYCLOAK, admin_password="pw"))
    with make(app, KC) as http:
        assert http.get("/admin/realms/master/groups").json() == {"error": "HTTP 401 Unauthorized"}
        token = http.post(
            "/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": "pw",
            },
        ).json()["access_token"]
        auth = {"Authorization": f"Bearer {token}"}
        assert http.get("/admin/realms/master/groups", headers=auth).status_code == 200
        server_time.offset = 59
        assert http.get("/admin/realms/master/groups", headers=auth).status_code == 200
        server_time.offset = 61  # the master realm's admin tokens live 60 s
        expired = http.get("/admin/realms/master/groups", headers=auth)
        assert expired.status_code == 401
        assert expired.json() == {"error": "HTTP 401 Unauthorized"}
        wrong = http.post(
            "/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": "nope",
            },
        )
        assert (wrong.status_code, wrong.json()) == (
            400,
            {"error": "invalid_grant", "error_description": "Invalid user credentials"},
        )


def _provision_realm(http: TestClient, resource: str) -> None:
    mappers = [
        {
            "name": "aud",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-audience-mapper",
            "config": {"included.custom.audience": resource, "access.token.claim": "true"},
        },
        {
            "name": "groups",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-group-membership-mapper",
            "config": {"claim.name": "groups", "full.path": "false", "access.token.claim": "true"},
        },
    ]
    scope = http.post(
        "/admin/realms/master/client-scopes",
        json={"name": "mcp", "protocol": "openid-connect", "protocolMappers": mappers},
    )
    scope_id = scope.headers["location"].rsplit("/", 1)[1]
    assert (
        http.put(f"/admin/realms/master/default-default-client-scopes/{scope_id}").status_code
        == 204
    )
    group = http.post("/admin/realms/master/groups", json={"name": "users"})
    group_id = group.headers["location"].rsplit("/", 1)[1]
    user = http.post(
        "/admin/realms/master/users",
        json={
            "username": "alice",
            "enabled": True,
            "credentials": [{"type": "password", "value": "alice-pw", "temporary": False}],
        },
    )
    user_id = user.headers["location"].rsplit("/", 1)[1]
    assert http.put(f"/admin/realms/master/users/{user_id}/groups/{group_id}").status_code == 204
    # idempotent join
    assert http.put(f"/admin/realms/master/users/{user_id}/groups/{group_id}").status_code == 204


def test_keycloak_dcr_is_blocked_until_the_policies_go(kc):
    http, _, _ = kc
    body = {"client_name": "c", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
    blocked = http.post("/realms/master/clients-registrations/openid-connect", json=body)
    assert blocked.status_code == 403
    assert "Trusted Hosts" in blocked.json()["error_description"]
    components = http.get(
        "/admin/realms/master/components",
        params={"type": "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"},
    ).json()
    assert len(components) == 10
    for c in components:
        if c["providerId"] == "trusted-hosts":
            assert http.delete(f"/admin/realms/master/components/{c['id']}").status_code == 204
    assert http.delete("/admin/realms/master/components/nope").json() == {
        "error": "Could not find component"
    }
    registered = http.post("/realms/master/clients-registrations/openid-connect", json=body)
    assert registered.status_code == 201
    assert registered.json()["client_id"]


def test_keycloak_tokens_follow_the_configured_mappers(kc):
    http, _, _ = kc
    resource = "http://127.0.0.1:8080/mcp"
    _provision_realm(http, resource)
    for c in http.get("/admin/realms/master/components").json():
        if c["providerId"] == "trusted-hosts":
            http.delete(f"/admin/realms/master/components/{c['id']}")
    client_id = http.post(
        "/realms/master/clients-registrations/openid-connect",
        json={
            "client_name": "Inspector",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
        },
    ).json()["client_id"]
    del http.headers["Authorization"]
    query, verifier = sign_in(
        http, "/realms/master/protocol/openid-connect/auth", client_id, "alice", "alice-pw"
    )
    assert query["state"] == ["st-1"]
    assert query["iss"] == [f"{KC}/realms/master"]  # RFC 9207
    tokens = redeem(
        http, "/realms/master/protocol/openid-connect/token", client_id, query["code"][0], verifier
    ).json()
    claims = unverified_claims(tokens["access_token"])
    assert claims["aud"] == resource
    assert claims["groups"] == ["users"]
    assert claims["iss"] == f"{KC}/realms/master"
    assert claims["azp"] == client_id
    # the code is single use
    again = redeem(
        http, "/realms/master/protocol/openid-connect/token", client_id, query["code"][0], verifier
    )
    assert again.json()["error"] == "invalid_grant"
    refreshed = http.post(
        "/realms/master/protocol/openid-connect/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": client_id,
        },
    ).json()
    assert unverified_claims(refreshed["access_token"])["groups"] == ["users"]
    denied = http.post(
        "/realms/master/protocol/openid-connect/token",
        data={"grant_type": "client_credentials", "client_id": client_id},
    )
    # Keycloak 26.7: a public client is refused before its grants are looked at.
    assert (denied.status_code, denied.json()) == (
        401,
        {
            "error": "unauthorized_client",
            "error_description": "Public client not allowed to retrieve service account",
        },
    )


def test_keycloak_pkce_is_verified(kc):
    http, _, _ = kc
    _provision_realm(http, "http://gw/mcp")
    for c in http.get("/admin/realms/master/components").json():
        if c["providerId"] == "trusted-hosts":
            http.delete(f"/admin/realms/master/components/{c['id']}")
    client_id = http.post(
        "/realms/master/clients-registrations/openid-connect",
        json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
    ).json()["client_id"]
    query, _ = sign_in(
        http, "/realms/master/protocol/openid-connect/auth", client_id, "alice", "alice-pw"
    )
    wrong = http.post(
        "/realms/master/protocol/openid-connect/token",
        data={
            "grant_type": "authorization_code",
            "code": query["code"][0],
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": "x" * 50,
        },
    )
    assert wrong.json() == {
        "error": "invalid_grant",
        "error_description": "PKCE verification failed: Code mismatch",
    }


def test_keycloak_id_token_fails_the_keycloak_access_token_rule(kc):
    http, _, _ = kc
    _provision_realm(http, "http://gw/mcp")
    for c in http.get("/admin/realms/master/components").json():
        if c["providerId"] == "trusted-hosts":
            http.delete(f"/admin/realms/master/components/{c['id']}")
    client_id = http.post(
        "/realms/master/clients-registrations/openid-connect",
        json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
    ).json()["client_id"]
    del http.headers["Authorization"]
    query, verifier = sign_in(
        http, "/realms/master/protocol/openid-connect/auth", client_id, "alice", "alice-pw"
    )
    tokens = redeem(
        http, "/realms/master/protocol/openid-connect/token", client_id, query["code"][0], verifier
    ).json()
    jwks = http.get("/realms/master/protocol/openid-connect/certs").json()
    issuer = f"{KC}/realms/master"
    access = gateway_verify(tokens["access_token"], jwks, issuer, "Keycloak", "http://gw/mcp")
    assert access["typ"] == "Bearer"
    id_claims = unverified_claims(tokens["id_token"])
    assert id_claims["typ"] == "ID"
    assert id_claims["sid"] == access["sid"]
    # signature and iss are fine (any aud): refused only for what it is
    with pytest.raises(TokenError, match=r"^this is an ID token \(typ claim 'ID'\)"):
        gateway_verify(tokens["id_token"], jwks, issuer, "Keycloak")


def test_each_flavour_splits_scope_as_its_provider_does():
    # Keycloak: TokenManager.parseScopeParameter splits on U+0020; authentik's views call
    # str.split(), any whitespace. The Broker refuses other whitespace before either sees it.
    from mcp_oauth_gateway.devidp.authentik import AuthentikFlavour
    from mcp_oauth_gateway.devidp.keycloak import KeycloakFlavour

    asked = "openid\u00a0profile  mcp:tools"
    assert KeycloakFlavour.scope_tokens(asked) == ["openid\u00a0profile", "mcp:tools"]
    assert AuthentikFlavour.scope_tokens(asked) == ["openid", "profile", "mcp:tools"]
