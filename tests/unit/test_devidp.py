"""The dev identity provider answers as the real servers do (reference/idp-apis.md), and its
OpenID side issues what the provisioning configured. The tests marked `contracts` check the same
exchanges against the providers' OpenAPI documents (kept outside the repository)."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from contracts import AUTHENTIK, KEYCLOAK, Recorder, validate
from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.dataplane.tokens import TokenError, TokenRules, verify_token
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app, oidc
from mcp_oauth_gateway.providers.access_tokens import access_token_rule
from support import unverified_claims

KC = "http://127.0.0.1:8180"
AK = "http://127.0.0.1:9000"
REDIRECT = "http://127.0.0.1:5555/callback"


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


# --- Keycloak flavour -----------------------------------------------------------------------


@pytest.fixture
def kc():
    app = create_app(DevIdpSettings(flavour="keycloak", admin_password="pw"))
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


class ServerTime:
    """The dev IdP's wall clock (token expiry), moved forward instead of waited for."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def server_time(monkeypatch: pytest.MonkeyPatch) -> ServerTime:
    shifted = ServerTime()
    monkeypatch.setattr(oidc, "time", shifted)
    return shifted


def test_keycloak_admin_auth_errors(server_time):
    app = create_app(DevIdpSettings(flavour="keycloak", admin_password="pw"))
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


# --- authentik flavour ----------------------------------------------------------------------


def ak_app(**settings: object):
    return create_app(
        DevIdpSettings(
            flavour="authentik",
            bootstrap_token="tok",
            seed_users=["alice", "bob"],
            access_token_ttl=3600,
            **settings,
        )
    )  # type: ignore[arg-type]


def test_authentik_startup_phases():
    with make(ak_app(migrations_seconds=60), AK) as http:
        as_json = http.get("/api/v3/core/users/", headers={"Accept": "application/json"})
        assert as_json.status_code == 503
        assert as_json.headers["retry-after"] == "5"
        assert as_json.json() == {"error": "authentik starting"}
        plain = http.get("/api/v3/core/users/", headers={"Accept": "*/*"})
        assert plain.text == "authentik starting"
        assert http.get("/-/health/live/").status_code == 200


def test_authentik_auth_errors_are_403():
    with make(ak_app(), AK) as http:
        missing = http.get("/api/v3/core/users/")
        assert missing.status_code == 403
        assert missing.json() == {"detail": "Authentication credentials were not provided."}
        wrong = http.get("/api/v3/core/users/", headers={"Authorization": "Bearer nope"})
        assert wrong.json() == {"detail": "Token invalid/expired"}


def _ak_provision(http: TestClient, grant_types: list[str]) -> dict:
    flows = {f["slug"]: f["pk"] for f in http.get("/api/v3/flows/instances/").json()["results"]}
    key = http.get("/api/v3/crypto/certificatekeypairs/", params={"has_key": "true"}).json()[
        "results"
    ][0]["pk"]
    mappings = [
        m["pk"]
        for m in http.get("/api/v3/propertymappings/provider/scope/").json()["results"]
        if m["scope_name"] in ("openid", "profile", "email")
    ]
    provider = http.post(
        "/api/v3/providers/oauth2/",
        json={
            "name": "mcp",
            "authorization_flow": flows["default-provider-authorization-implicit-consent"],
            "invalidation_flow": flows["default-invalidation-flow"],
            "client_type": "public",
            "grant_types": grant_types,
            "redirect_uris": [{"matching_mode": "regex", "url": r"http://127\.0\.0\.1:\d+/.*"}],
            "sub_mode": "user_username",
            "signing_key": key,
            "property_mappings": mappings,
        },
    )
    assert provider.status_code == 201, provider.text
    app = http.post(
        "/api/v3/core/applications/",
        json={"name": "mcp", "slug": "mcp", "provider": provider.json()["pk"]},
    )
    assert app.status_code == 201
    group = http.post("/api/v3/core/groups/", json={"name": "mcp-agent"}).json()
    alice = http.get("/api/v3/core/users/", params={"username": "alice"}).json()["results"][0]
    assert (
        http.post(
            f"/api/v3/core/groups/{group['pk']}/add_user/", json={"pk": alice["pk"]}
        ).status_code
        == 204
    )
    return provider.json()


def _authentik_answers(http: TestClient) -> None:
    provider = _ak_provision(http, ["authorization_code", "refresh_token", "client_credentials"])
    assert len(provider["client_id"]) == 40
    assert len(provider["client_secret"]) == 128
    listing = http.get("/api/v3/core/groups/", params={"name": "mcp-agent"}).json()
    assert set(listing["pagination"]) == {
        "next",
        "previous",
        "count",
        "current",
        "total_pages",
        "start_index",
        "end_index",
    }
    assert listing["pagination"]["next"] == 0
    assert http.get("/api/v3/core/applications/mcp/").json()["provider"] == provider["pk"]
    assert http.get("/api/v3/core/applications/nope/").status_code == 404
    assert (
        http.get(
            "/api/v3/core/applications/", params={"superuser_full_list": "true", "slug": "nope"}
        ).json()["results"]
        == []
    )
    duplicate = http.post("/api/v3/core/groups/", json={"name": "mcp-agent"})
    assert duplicate.json() == {"name": ["Group with this name already exists."]}
    reserved = http.post("/api/v3/core/applications/", json={"name": "x", "slug": "token"})
    assert reserved.json() == {
        "slug": ["The slug 'token' is reserved and cannot be used for applications."]
    }


def _authentik_refusals(http: TestClient) -> None:
    """Requests invalid on purpose, and authentik's field errors."""
    bad = http.post(
        "/api/v3/providers/oauth2/",
        json={
            "name": "x",
            "authorization_flow": "",
            "invalidation_flow": "not-a-uuid",
            "redirect_uris": [],
        },
    )
    assert bad.status_code == 400
    assert bad.json()["authorization_flow"] == ["This field may not be null."]
    assert bad.json()["invalidation_flow"] == ["“not-a-uuid” is not a valid UUID."]
    missing = http.post("/api/v3/providers/oauth2/", json={"name": "y"})
    assert missing.json()["authorization_flow"] == ["This field is required."]


def test_authentik_api_answers():
    with make(ak_app(), AK) as http:
        http.headers["Authorization"] = "Bearer tok"
        _authentik_answers(http)
        _authentik_refusals(http)


@pytest.mark.contracts
def test_authentik_api_exchanges_follow_the_contract():
    recorder = Recorder()
    with make(ak_app(), AK, recorder) as http:
        http.headers["Authorization"] = "Bearer tok"
        _authentik_answers(http)
        valid_requests = len(recorder.exchanges)
        _authentik_refusals(http)
    problems = [
        p
        for i, (q, r) in enumerate(recorder.exchanges)
        if q.url.path.startswith("/api/v3/")
        for p in validate(str(AUTHENTIK), q, r, check_request=i < valid_requests)
    ]
    assert problems == []


def _slugs(http: TestClient, **params: str) -> list[str]:
    response = http.get("/api/v3/core/applications/", params=params)
    assert response.status_code == 200, response.text
    return [a["slug"] for a in response.json()["results"]]


def test_authentik_application_list_ignores_filters_behind_its_cache():
    """As authentik 2025.12 to 2026.5: the first page read is cached per user and page, and a
    later `?slug=` gets it whatever it asks for."""
    with make(ak_app(), AK) as http:
        http.headers["Authorization"] = "Bearer tok"
        _ak_provision(http, ["authorization_code"])
        assert _slugs(http, slug="nope") == [], "an empty page is computed, not cached"
        assert _slugs(http) == ["mcp"]
        stale = http.get("/api/v3/core/applications/", params={"slug": "nope"}).json()
        assert [a["slug"] for a in stale["results"]] == ["mcp"]
        assert stale["pagination"]["count"] == 0, "the count is of the filtered list"
        # what bypasses the cache
        assert _slugs(http, slug="nope", superuser_full_list="true") == []
        assert _slugs(http, search="nope") == []
        assert _slugs(http, search="mc") == ["mcp"]
        assert http.get("/api/v3/core/applications/nope/").status_code == 404
        # adding a user to a group saves neither: the cache stays
        group = http.get("/api/v3/core/groups/", params={"name": "mcp-agent"}).json()
        bob = http.get("/api/v3/core/users/", params={"username": "bob"}).json()["results"][0]
        assert (
            http.post(
                f"/api/v3/core/groups/{group['results'][0]['pk']}/add_user/", json={"pk": bob["pk"]}
            ).status_code
            == 204
        )
        assert _slugs(http, slug="nope") == ["mcp"]
        # saving a group clears it
        assert http.post("/api/v3/core/groups/", json={"name": "other"}).status_code == 201
        assert _slugs(http, slug="nope") == []
        # creating an application clears it; pages are cached apart
        assert (
            http.post(
                "/api/v3/core/applications/", json={"name": "another", "slug": "another"}
            ).status_code
            == 201
        )
        assert _slugs(http, page_size="1") == ["another"]
        assert _slugs(http, page_size="1", page="2") == ["mcp"]
        assert _slugs(http, page_size="1", slug="mcp") == ["another"]
        assert _slugs(http, page_size="1", page="2", slug="another") == ["mcp"]


def test_authentik_application_list_cache_lasts_a_day_or_until_a_user_is_saved():
    app = ak_app()
    now = [app.flavour.started]
    app.flavour.clock = lambda: now[0]
    with make(app, AK) as http:
        http.headers["Authorization"] = "Bearer tok"
        provider = _ak_provision(http, ["authorization_code", "client_credentials"])
        assert _slugs(http) == ["mcp"]
        # client_credentials upserts the service account `ak-mcp-client_credentials`: a user
        # save, which clears every cached page
        assert (
            http.post(
                "/application/o/token/",
                headers={"Authorization": ""},
                data={
                    "grant_type": "client_credentials",
                    "client_id": provider["client_id"],
                    "client_secret": provider["client_secret"],
                },
            ).status_code
            == 200
        )
        assert _slugs(http, slug="nope") == []
        assert _slugs(http) == ["mcp"]
        now[0] += 86399
        assert _slugs(http, slug="nope") == ["mcp"]
        now[0] += 2
        assert _slugs(http, slug="nope") == []


def test_authentik_tokens_follow_the_provider():
    with make(ak_app(), AK) as http:
        http.headers["Authorization"] = "Bearer tok"
        provider = _ak_provision(
            http, ["authorization_code", "refresh_token", "client_credentials"]
        )
        del http.headers["Authorization"]
        discovery = http.get("/application/o/mcp/.well-known/openid-configuration").json()
        assert discovery["issuer"] == f"{AK}/application/o/mcp/"
        assert "registration_endpoint" not in discovery
        query, verifier = sign_in(
            http, "/application/o/authorize/", provider["client_id"], "alice", "dev-password"
        )
        assert query["iss"] == [f"{AK}/application/o/mcp/"]
        tokens = redeem(
            http, "/application/o/token/", provider["client_id"], query["code"][0], verifier
        ).json()
        claims = unverified_claims(tokens["access_token"])
        assert claims["aud"] == provider["client_id"]
        assert claims["sub"] == "alice"
        assert claims["groups"] == ["mcp-agent"]
        service = http.post(
            "/application/o/token/",
            data={
                "grant_type": "client_credentials",
                "client_id": provider["client_id"],
                "client_secret": provider["client_secret"],
                "scope": "openid profile",
            },
        ).json()
        service_claims = unverified_claims(service["access_token"])
        assert service_claims["sub"] == "ak-mcp-client_credentials"
        assert service_claims["aud"] == provider["client_id"]
        assert service_claims["groups"] == []
        jwks = http.get("/application/o/mcp/jwks/").json()
        assert [k["kid"] for k in jwks["keys"]] == [unverified_header_kid(tokens["access_token"])]


def unverified_header_kid(token: str) -> str:
    import json

    head = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))["kid"]


def test_authentik_rejects_grants_the_provider_lacks():
    with make(ak_app(), AK) as http:
        http.headers["Authorization"] = "Bearer tok"
        provider = _ak_provision(http, ["authorization_code"])
        del http.headers["Authorization"]
        response = http.post(
            "/application/o/token/",
            data={
                "grant_type": "client_credentials",
                "client_id": provider["client_id"],
                "client_secret": provider["client_secret"],
            },
        )
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_grant"


def test_login_page_says_it_is_for_development_only():
    with make(ak_app(), AK) as http:
        http.headers["Authorization"] = "Bearer tok"
        provider = _ak_provision(http, ["authorization_code"])
        _, challenge = pkce()
        first = http.get(
            "/application/o/authorize/",
            params={
                "response_type": "code",
                "client_id": provider["client_id"],
                "redirect_uri": REDIRECT,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            },
        )
        page = http.get(first.headers["location"])
        assert "for development and tests only" in page.text
        wrong = http.post(
            first.headers["location"],
            data={"prompt": "login", "login": "alice", "password": "wrong"},
        )
        assert wrong.status_code == 401
        assert "Invalid username or password" in wrong.text
        evil = http.get(
            "/application/o/authorize/",
            params={
                "response_type": "code",
                "client_id": provider["client_id"],
                "redirect_uri": "https://evil.example/cb",
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            },
        )
        assert evil.status_code == 400, "never redirect to an unregistered URI"


# --- the ID token is not an access token, as the gateway's rule for each provider sees it ---


def _gateway_verify(
    token: str, jwks: dict, issuer: str, provider: str, audience: str | None = None
) -> dict:
    """What the gateway's authentication stage does with this token (rule by provider)."""
    rules = TokenRules(
        issuer=issuer,
        audiences=frozenset({audience}) if audience else None,
        access_token=access_token_rule(provider),
    )
    return verify_token(token, parse_jwks(jwks, version=1), rules, time.time())


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
    access = _gateway_verify(tokens["access_token"], jwks, issuer, "Keycloak", "http://gw/mcp")
    assert access["typ"] == "Bearer"
    id_claims = unverified_claims(tokens["id_token"])
    assert id_claims["typ"] == "ID"
    assert id_claims["sid"] == access["sid"]
    # signature and iss are fine (any aud): refused only for what it is
    with pytest.raises(TokenError, match=r"^this is an ID token \(typ claim 'ID'\)"):
        _gateway_verify(tokens["id_token"], jwks, issuer, "Keycloak")


def test_authentik_id_token_fails_the_authentik_access_token_rule():
    with make(ak_app(), AK) as http:
        http.headers["Authorization"] = "Bearer tok"
        provider = _ak_provision(http, ["authorization_code", "refresh_token"])
        del http.headers["Authorization"]
        client_id = provider["client_id"]
        query, verifier = sign_in(
            http, "/application/o/authorize/", client_id, "alice", "dev-password"
        )
        tokens = redeem(http, "/application/o/token/", client_id, query["code"][0], verifier).json()
        jwks = http.get("/application/o/mcp/jwks/").json()
    issuer = f"{AK}/application/o/mcp/"
    access = _gateway_verify(tokens["access_token"], jwks, issuer, "ProviderB", client_id)
    id_claims = unverified_claims(tokens["id_token"])
    # authentik's access token is the ID token plus azp and uid; same iss, aud and signer
    assert id_claims["aud"] == access["aud"] == client_id
    shared = set(access) - {"azp", "uid", "jti"}
    assert set(id_claims) - {"auth_time"} == shared
    assert all(id_claims[name] == access[name] for name in shared)
    with pytest.raises(TokenError, match=r"^this is an ID token \(it has no uid and azp claim"):
        _gateway_verify(tokens["id_token"], jwks, issuer, "ProviderB", client_id)


def test_each_flavour_splits_scope_as_its_provider_does():
    # Keycloak: TokenManager.parseScopeParameter splits on U+0020; authentik's views call
    # str.split(), any whitespace. The Broker refuses other whitespace before either sees it.
    from mcp_oauth_gateway.devidp.authentik import AuthentikFlavour
    from mcp_oauth_gateway.devidp.keycloak import KeycloakFlavour

    asked = "openid\u00a0profile  mcp:tools"
    assert KeycloakFlavour.scope_tokens(asked) == ["openid\u00a0profile", "mcp:tools"]
    assert AuthentikFlavour.scope_tokens(asked) == ["openid", "profile", "mcp:tools"]
