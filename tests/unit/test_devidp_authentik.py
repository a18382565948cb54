"""The dev identity provider's authentik flavour answers as the real server does
(reference/idp-apis.md): its start-up phases, API errors, provisioning, application list cache and
OpenID side. The tests marked `contracts` check the same exchanges against authentik's OpenAPI
document (kept outside the repository)."""

from __future__ import annotations

import base64

import pytest
from starlette.testclient import TestClient

from contracts import AUTHENTIK, Recorder, validate
from mcp_oauth_gateway.dataplane.tokens import TokenError
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.provider_kinds import ProviderKind
from support import unverified_claims
from unit.devidp_support import AK, REDIRECT, gateway_verify, make, pkce, redeem, sign_in


def ak_app(**settings: object):
    return create_app(
        DevIdpSettings(
            kind=ProviderKind.AUTHENTIK,
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
    access = gateway_verify(tokens["access_token"], jwks, issuer, "ProviderB", client_id)
    id_claims = unverified_claims(tokens["id_token"])
    # authentik's access token is the ID token plus azp and uid; same iss, aud and signer
    assert id_claims["aud"] == access["aud"] == client_id
    shared = set(access) - {"azp", "uid", "jti"}
    assert set(id_claims) - {"auth_time"} == shared
    assert all(id_claims[name] == access[name] for name in shared)
    with pytest.raises(TokenError, match=r"^this is an ID token \(it has no uid and azp claim"):
        gateway_verify(tokens["id_token"], jwks, issuer, "ProviderB", client_id)
