"""The dev IdP's Keycloak flavour and real Keycloak 26.7 under the same assertions (token
endpoint refusals, tokens, a registered client's scopes, CORS, authorization refusals, consent,
sessions); what the dev IdP does not emulate is in docs/dev-idp.md. Real Keycloak is the
session's server: its master realm (the dev IdP has no other), a user and clients of our own."""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from keycloak_support import FLAVOURS, USER_PASSWORD, Provider, either_provider
from provider_parity_support import APP, CALLBACK, USER, Browser, code_form
from support import unverified_claims

POLICY_TYPE = "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"
EVIL = "http://evil.example"
BUILTIN = {"openid", "profile", "email", "roles", "web-origins", "acr", "basic", "phone"}
REALM_DEFAULTS = {"acr", "basic", "email", "profile", "roles", "web-origins"}
REALM_OPTIONAL = {"address", "microprofile-jwt", "offline_access", "organization", "phone"}
ALLOW_HEADERS = {
    *("Origin", "Access-Control-Request-Method", "X-Requested-With", "Accept"),
    *("Access-Control-Request-Headers", "DPoP", "Content-Type", "Authorization"),
}


@pytest.fixture(scope="module", params=FLAVOURS)
def provider(
    request: pytest.FixtureRequest, logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Provider]:
    """Real Keycloak or the dev IdP, open to anonymous registration (as `idp keycloak` leaves
    it), with one user."""
    providers = either_provider(request, logs, tmp_path_factory)
    yield prepared(next(providers))
    next(providers, None)


def prepared(provider: Provider) -> Provider:
    for policy in provider.admin("GET", "/components", params={"type": POLICY_TYPE}).json():
        if policy["providerId"] == "trusted-hosts":
            assert provider.admin("DELETE", f"/components/{policy['id']}").status_code == 204
    if not provider.admin("GET", "/users", params={"username": USER, "exact": "true"}).json():
        provider.add_user(USER)  # Parity-Ann Outsider, parity-ann@example.com, verified
    return provider


def register(provider: Provider, **body: Any) -> dict[str, Any]:
    answer = httpx.post(
        f"{provider.issuer()}/clients-registrations/openid-connect",
        json={"client_name": "parity", "redirect_uris": [CALLBACK], **body},
    )
    assert answer.status_code == 201, answer.text
    client: dict[str, Any] = answer.json()
    return client


def public_client(provider: Provider, **body: Any) -> dict[str, Any]:
    return register(provider, token_endpoint_auth_method="none", **body)


def token(provider: Provider, data: dict[str, str], **kwargs: Any) -> httpx.Response:
    return httpx.post(provider.token_endpoint(), data=data, **kwargs)


def answer_of(response: httpx.Response) -> tuple[int, Any]:
    return response.status_code, response.json()


def jose_header(jwt: str) -> dict[str, Any]:
    segment = jwt.split(".")[0]
    return dict(json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))))


# --- the token endpoint's refusals ------------------------------------------------------------


def refusal(status: int | str, error: str, description: str) -> tuple[int, dict[str, str]]:
    return int(status), {"error": error, "error_description": description}


def test_token_endpoint_refusals_without_a_code(provider):
    pub = public_client(provider)["client_id"]
    post = "client_secret_post"
    conf = register(provider, grant_types=["authorization_code"], token_endpoint_auth_method=post)
    consenting = register(provider, grant_types=["password"], token_endpoint_auth_method=post)
    secret = {"client_id": conf["client_id"], "client_secret": conf["client_secret"]}
    user = {"username": USER, "password": USER_PASSWORD}
    consent = {"client_id": consenting["client_id"], "client_secret": consenting["client_secret"]}
    code = {"grant_type": "authorization_code", "client_id": pub, "redirect_uri": CALLBACK}
    refresh = {"grant_type": "refresh_token", "client_id": pub}
    admin_cli = {"client_id": "admin-cli"}
    bad_client = "Invalid client or Invalid client credentials"
    password, cc = {"grant_type": "password"}, {"grant_type": "client_credentials"}
    cases = [  # (case, form, "status error description")
        ("unknown client", {**code, "client_id": "nope"}, f"401 invalid_client {bad_client}"),
        ("no grant_type", {"client_id": pub},
         "400 invalid_request Missing form parameter: grant_type"),
        ("unknown grant", {"grant_type": "bogus", "client_id": pub},
         "400 unsupported_grant_type Unsupported grant_type"),
        ("expired code", {**code, "code": "x"}, "400 invalid_grant Code not valid"),
        ("no code", code, "400 invalid_request Missing parameter: code"),
        ("bad refresh token", {**refresh, "refresh_token": "x"},
         "400 invalid_grant Invalid refresh token"),
        ("no refresh token", refresh, "400 invalid_request No refresh token"),
        ("wrong password", {**admin_cli, **password, "username": "admin", "password": "wrong"},
         "400 invalid_grant Invalid user credentials"),
        ("public client credentials", {**admin_cli, **cc},
         "401 unauthorized_client Public client not allowed to retrieve service account"),
        ("wrong secret", {**secret, **cc, "client_secret": "wrong"},
         f"401 unauthorized_client {bad_client}"),
        ("no service account", {**secret, **cc},
         "401 unauthorized_client Client not enabled to retrieve service account"),
        ("no direct grants", {**secret, **user, **password},
         "400 unauthorized_client Client not allowed for direct access grants"),
        ("consent required", {**consent, **user, **password},
         "400 invalid_client Client requires user consent"),
    ]  # fmt: skip
    seen = {name: answer_of(token(provider, form)) for name, form, _ in cases}
    assert seen == {name: refusal(*answer.split(" ", 2)) for name, _, answer in cases}


async def test_code_grant_refusals(provider, monkeypatch):
    client = public_client(provider)["client_id"]
    other = public_client(provider)["client_id"]
    browser = Browser(monkeypatch)
    cases = {
        "wrong redirect_uri": lambda form: {**form, "redirect_uri": f"{APP}/other"},
        "wrong verifier": lambda form: {**form, "code_verifier": "x" * 43},
        "no verifier": lambda form: {k: v for k, v in form.items() if k != "code_verifier"},
        "another client": lambda form: {**form, "client_id": other},
    }
    seen = {}
    for name, change in cases.items():
        query, verifier = await browser.sign_in(provider, client, "openid")
        form = code_form(client, query["code"], verifier)
        # A code is good for one try only: the right form comes too late.
        seen[name] = (answer_of(token(provider, change(form))), answer_of(token(provider, form)))
    spent = refusal(400, "invalid_grant", "Code not valid")
    assert seen == {
        "wrong redirect_uri": (refusal(400, "invalid_grant", "Incorrect redirect_uri"), spent),
        "wrong verifier": (
            refusal(400, "invalid_grant", "PKCE verification failed: Code mismatch"),
            spent,
        ),
        "no verifier": (refusal(400, "invalid_grant", "PKCE code verifier not specified"), spent),
        "another client": (
            refusal(400, "invalid_grant", "Auth error: Found different client_id in clientSession"),
            spent,
        ),
    }


# --- tokens -----------------------------------------------------------------------------------


async def test_access_and_id_tokens_carry_the_same_header_and_claims(provider, monkeypatch):
    client = public_client(provider)["client_id"]
    query, verifier = await Browser(monkeypatch).sign_in(provider, client, "openid")
    assert set(query) == {"code", "iss", "state", "session_state"}
    asked = time.time()
    answer = token(provider, code_form(client, query["code"], verifier))
    answered = time.time()
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    tokens = answer.json()
    assert set(tokens) == {
        *("access_token", "expires_in", "id_token", "not-before-policy", "refresh_expires_in"),
        *("refresh_token", "scope", "session_state", "token_type"),
    }
    assert tokens["token_type"] == "Bearer"
    assert set(tokens["scope"].split()) & BUILTIN == {"openid", "email", "profile"}
    header = jose_header(tokens["access_token"])
    assert (set(header), header["alg"], header["typ"]) == ({"alg", "typ", "kid"}, "RS256", "JWT")
    claims = unverified_claims(tokens["access_token"])
    # aud and groups come from the mcp scope when another module's `idp keycloak` made it a
    # default of the shared realm.
    access_claims = {
        *("exp", "iat", "auth_time", "jti", "iss", "sub", "typ", "azp", "sid", "acr"),
        *("allowed-origins", "scope", "email_verified", "name", "preferred_username"),
        *("given_name", "family_name", "email"),
    }
    assert set(claims) - {"aud", "groups"} == access_claims
    # Keycloak counts expires_in from the moment it answers, not from iat: a second boundary
    # crossed while it answers gives 59 for a 60-second token. It also reads its clock twice
    # for the token (TokenManager: iat in issuedNow, then exp as currentTimeMillis + lifespan),
    # so the same boundary between the two reads makes exp - iat 61: the 60 s lifespan is
    # exp - 60 read between the clock before and after the request, and iat not after it.
    assert math.floor(asked) <= claims["iat"] <= claims["exp"] - 60 <= math.floor(answered)
    remaining = (claims["exp"] - math.ceil(answered), claims["exp"] - math.floor(asked))
    assert remaining[0] <= tokens["expires_in"] <= remaining[1], (tokens["expires_in"], remaining)
    assert tokens["session_state"] == query["session_state"]
    expected = {"typ": "Bearer", "azp": client, "sid": query["session_state"], "acr": "1"}
    expected |= {"allowed-origins": [APP], "preferred_username": USER, "email_verified": True}
    expected |= {"email": f"{USER}@example.com", "name": "Parity-Ann Outsider"}
    expected |= {"given_name": "Parity-Ann", "family_name": "Outsider"}
    assert {k: claims[k] for k in expected} == expected
    assert set(claims["scope"].split()) & BUILTIN == {"openid", "email", "profile"}
    assert jose_header(tokens["id_token"])["typ"] == "JWT"
    id_claims = unverified_claims(tokens["id_token"])
    id_only, access_only = {"aud", "nonce"}, {"allowed-origins", "scope"}
    assert set(id_claims) - {"at_hash", "groups"} == access_claims - access_only | id_only
    assert (id_claims["typ"], id_claims["aud"], id_claims["nonce"]) == ("ID", client, "n-1")
    assert id_claims["sid"] == claims["sid"]
    refresh = {"grant_type": "refresh_token", "client_id": client}
    again = token(provider, {**refresh, "refresh_token": tokens["refresh_token"]}).json()
    assert unverified_claims(again["access_token"])["sid"] == claims["sid"]  # the same session
    refresh_token = (jose_header(again["refresh_token"]), unverified_claims(again["refresh_token"]))
    assert (refresh_token[0]["alg"], refresh_token[1]["typ"]) == ("HS512", "Refresh")


SCOPES_POLICY = {"name": "Allowed Client Scopes", "providerId": "allowed-client-templates"}
SCOPES_POLICY |= {"providerType": POLICY_TYPE, "subType": "anonymous"}
SCOPES_POLICY |= {"config": {"allowed-client-scopes": [], "allow-default-scopes": ["true"]}}


@contextmanager
def scopes_policy(provider: Provider, present: bool) -> Iterator[None]:
    """The anonymous Allowed Client Scopes policy there (fresh realm) or not (`idp keycloak`)."""
    policies = provider.admin("GET", "/components", params={"type": POLICY_TYPE}).json()
    kind = ("allowed-client-templates", "anonymous")
    found = [p for p in policies if (p["providerId"], p["subType"]) == kind]
    if present and not found:
        parent = provider.admin("GET", "").json()["id"]
        added = provider.admin("POST", "/components", json={**SCOPES_POLICY, "parentId": parent})
        assert added.status_code == 201, added.text
    for policy in found if not present else []:
        assert provider.admin("DELETE", f"/components/{policy['id']}").status_code == 204
    try:
        yield
    finally:
        if present and not found:
            added_id = added.headers["location"].rsplit("/", 1)[1]
            assert provider.admin("DELETE", f"/components/{added_id}").status_code == 204
        for policy in found if not present else []:
            assert provider.admin("POST", "/components", json=policy).status_code == 201


def test_the_allowed_client_scopes_policy_refuses_openid(provider):
    """Only the realm's default and optional scopes: the TypeScript SDK's `openid profile` fails."""
    endpoint = f"{provider.issuer()}/clients-registrations/openid-connect"
    body = {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
    with scopes_policy(provider, present=True):
        seen = {
            scope: httpx.post(endpoint, json={**body, "scope": scope}).status_code
            for scope in ("profile", "phone", "openid", "openid profile", "bogus")
        }
    refused = dict.fromkeys(("openid", "openid profile", "bogus"), 403)
    assert seen == {"profile": 201, "phone": 201, **refused}


REGISTERED = {  # the members of Keycloak's answer to a public client's registration
    *("redirect_uris", "token_endpoint_auth_method", "grant_types", "response_types"),
    *("client_id", "client_name", "scope", "subject_type", "request_uris"),
    *("tls_client_certificate_bound_access_tokens", "dpop_bound_access_tokens"),
    *("post_logout_redirect_uris", "client_id_issued_at", "registration_client_uri"),
    *("registration_access_token", "backchannel_logout_session_required"),
    *("require_pushed_authorization_requests", "frontchannel_logout_session_required"),
}


async def test_a_client_registered_with_a_scope_gets_those_scopes_only(provider, monkeypatch):
    plain = public_client(provider, redirect_uris=[CALLBACK, "http://localhost:6274/cb"])
    assert set(plain) == REGISTERED
    with scopes_policy(provider, present=False):
        scoped = public_client(provider, scope="openid profile")
    lists, shown = {}, {}
    for name, registered in (("plain", plain), ("scoped", scoped)):
        found = provider.admin("GET", "/clients", params={"clientId": registered["client_id"]})
        shown[name] = found.json()[0]
        assert (shown[name]["consentRequired"], shown[name]["fullScopeAllowed"]) == (True, False)
        uuid = shown[name]["id"]
        for kind in ("default", "optional"):
            listing = provider.admin("GET", f"/clients/{uuid}/{kind}-client-scopes").json()
            lists[name, kind] = {s["name"] for s in listing}
    assert shown["plain"]["webOrigins"] == [APP, "http://localhost:6274"]
    assert lists["plain", "default"] >= REALM_DEFAULTS
    assert lists["plain", "optional"] == REALM_OPTIONAL
    assert set(plain["scope"].split()) == REALM_OPTIONAL
    assert lists["scoped", "default"] == {"basic"}
    assert lists["scoped", "optional"] == {"profile"}
    assert scoped["scope"] == "profile"
    query, verifier = await Browser(monkeypatch).sign_in(
        provider, scoped["client_id"], "openid profile"
    )
    tokens = token(provider, code_form(scoped["client_id"], query["code"], verifier)).json()
    claims = unverified_claims(tokens["access_token"])
    assert (tokens["scope"], claims["scope"]) == ("openid profile", "openid profile")
    for absent in ("aud", "groups", "email", "acr", "allowed-origins"):
        assert absent not in claims


# --- CORS -------------------------------------------------------------------------------------


def echoed(origin: str, expose: bool = False) -> dict[str, str]:
    """The CORS headers of an actual response that allows `origin`."""
    found = {"access-control-allow-origin": origin, "access-control-allow-credentials": "true"}
    exposed = {"access-control-expose-headers": "Access-Control-Allow-Methods"}
    return found | exposed if expose else found


def cors(response: httpx.Response) -> dict[str, Any]:
    """The CORS headers (Keycloak lists the allowed headers in no fixed order: as a set)."""
    found: dict[str, Any] = {k: v for k, v in response.headers.items() if "access-control-" in k}
    if "access-control-allow-headers" in found:
        found["access-control-allow-headers"] = set(
            found["access-control-allow-headers"].split(", ")
        )
    return found


def test_preflights_are_answered_for_every_origin(provider):
    oidc = f"{provider.issuer()}/protocol/openid-connect"
    registration = f"{provider.issuer()}/clients-registrations/openid-connect"
    for path, origin, methods in (
        (f"{oidc}/token", EVIL, "POST, OPTIONS"),
        (registration, APP, "DELETE, POST, GET, OPTIONS, PUT"),
        (f"{oidc}/userinfo", APP, "GET, HEAD, OPTIONS"),
        (f"{provider.issuer()}/.well-known/openid-configuration", EVIL, "GET"),
    ):
        asked = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        answer = httpx.options(path, headers=asked)
        expected = {"access-control-allow-origin": origin, "access-control-allow-methods": methods}
        expected |= {"access-control-allow-credentials": "true", "access-control-max-age": "3600"}
        expected |= {"access-control-allow-headers": ALLOW_HEADERS}
        assert (answer.status_code, cors(answer)) == (200, expected), path


def test_the_token_endpoint_allows_the_clients_web_origins_only(provider):
    client = public_client(provider)["client_id"]
    form = {"grant_type": "refresh_token", "client_id": client, "refresh_token": "x"}
    allowed = token(provider, form, headers={"Origin": APP})
    assert answer_of(allowed) == refusal(400, "invalid_grant", "Invalid refresh token")
    assert cors(allowed) == echoed(APP, expose=True)
    refused = token(provider, form, headers={"Origin": EVIL})
    assert (answer_of(refused), cors(refused)) == ((403, {"error": "Invalid origin"}), {})
    unknown = token(provider, {**form, "client_id": "nope"}, headers={"Origin": EVIL})
    assert (unknown.status_code, cors(unknown)["access-control-allow-origin"]) == (401, EVIL)
    bogus = token(provider, {**form, "grant_type": "bogus"}, headers={"Origin": APP})
    assert (bogus.status_code, cors(bogus)) == (400, {})
    discovery = httpx.get(
        f"{provider.issuer()}/.well-known/openid-configuration", headers={"Origin": EVIL}
    )
    assert cors(discovery) == echoed(EVIL)


def test_registration_from_a_browser_needs_the_web_origins_policy(provider):
    endpoint = f"{provider.issuer()}/clients-registrations/openid-connect"
    body = {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
    refused = httpx.post(endpoint, json=body, headers={"Origin": APP})
    assert (answer_of(refused), cors(refused)) == ((403, {"error": "Invalid origin"}), {})
    policies = provider.admin("GET", "/components", params={"type": POLICY_TYPE}).json()
    kind = ("registration-web-origins", "anonymous")
    policy = next(p for p in policies if (p["providerId"], p["subType"]) == kind)
    assert policy["config"] == {}
    changed = {**policy, "config": {"web-origins": [APP]}}
    assert provider.admin("PUT", f"/components/{policy['id']}", json=changed).status_code == 204
    try:
        allowed = httpx.post(endpoint, json=body, headers={"Origin": APP})
        other = httpx.post(endpoint, json=body, headers={"Origin": EVIL})
    finally:
        assert provider.admin("PUT", f"/components/{policy['id']}", json=policy).status_code == 204
    assert allowed.status_code == 201, allowed.text
    assert cors(allowed) == echoed(APP)
    assert (answer_of(other), cors(other)) == ((403, {"error": "Invalid origin"}), {})


# --- the authorization endpoint and consent ---------------------------------------------------


def test_the_authorization_endpoint_never_redirects_to_an_unregistered_uri(provider):
    client = public_client(provider)["client_id"]
    auth = f"{provider.issuer()}/protocol/openid-connect/auth"
    base = {"response_type": "code", "client_id": client, "scope": "openid", "state": "st-1"}
    for params, message in (
        ({**base, "redirect_uri": "http://evil.example/cb"}, "Invalid parameter: redirect_uri"),
        (base, "Invalid parameter: redirect_uri"),
        ({**base, "client_id": "nope", "redirect_uri": CALLBACK}, "Client not found."),
    ):
        page = httpx.get(auth, params=params)
        assert (page.status_code, "location" in page.headers) == (400, False)
        assert page.headers["content-type"].startswith("text/html")
        assert message in page.text
    asked = {**base, "redirect_uri": CALLBACK, "scope": "openid bogus"}
    unknown_scope = httpx.get(auth, params=asked)
    assert unknown_scope.status_code == 302
    back = dict(parse_qsl(urlsplit(unknown_scope.headers["location"]).query))
    error = {"error": "invalid_scope", "error_description": "Invalid scopes: openid bogus"}
    assert back == {**error, "state": "st-1", "iss": provider.issuer()}


async def test_a_registered_client_asks_consent_once_per_scope_set(provider, monkeypatch):
    client = public_client(provider)["client_id"]
    browser = Browser(monkeypatch)
    met = []
    for scope in ("openid", "openid", "openid phone"):
        query, _ = await browser.sign_in(provider, client, scope)
        assert "code" in query, query
        met.append(browser.pages)
    assert met == [["login", "consent"], ["login"], ["login", "consent"]]
    other = public_client(provider)["client_id"]
    denied, _ = await Browser(monkeypatch, consent="no").sign_in(provider, other, "openid")
    assert denied == {"error": "access_denied", "state": "st-1", "iss": provider.issuer()}


# --- how sessions end -------------------------------------------------------------------------


def test_sessions_end_as_keycloak_ends_them(provider):
    oidc = f"{provider.issuer()}/protocol/openid-connect"
    direct = {"clientId": "parity-direct", "publicClient": True, "directAccessGrantsEnabled": True}
    if not provider.admin("GET", "/clients", params={"clientId": "parity-direct"}).json():
        assert provider.admin("POST", "/clients", json=direct).status_code == 201
    user = {"client_id": "parity-direct", "username": USER, "password": USER_PASSWORD}

    def sign_in() -> dict[str, Any]:
        return token(provider, {**user, "grant_type": "password", "scope": "openid"}).json()

    def refreshed(tokens: dict[str, Any], **extra: str) -> Any:
        form = {"grant_type": "refresh_token", "client_id": "parity-direct", **extra}
        sent = token(provider, {**form, "refresh_token": tokens["refresh_token"]})
        return 200 if sent.status_code == 200 else answer_of(sent)

    def userinfo(tokens: dict[str, Any]) -> int:
        bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
        return httpx.get(f"{oidc}/userinfo", headers=bearer).status_code

    def revoke(value: str) -> httpx.Response:
        return httpx.post(f"{oidc}/revoke", data={"client_id": "parity-direct", "token": value})

    def after(done: httpx.Response, tokens: dict[str, Any]) -> tuple[int, Any, int]:
        return done.status_code, refreshed(tokens), userinfo(tokens)

    kept, by_refresh, by_access, logged_out = sign_in(), sign_in(), sign_in(), sign_in()
    seen = {"again": (refreshed(kept), refreshed(kept), userinfo(kept))}
    seen["unknown scope"] = refreshed(kept, scope="openid unheard-of")
    seen["revoke refresh"] = after(revoke(by_refresh["refresh_token"]), by_refresh)
    seen["revoke access"] = after(revoke(by_access["access_token"]), by_access)
    seen["revoke garbage"] = answer_of(revoke("garbage"))
    user_id = unverified_claims(logged_out["access_token"])["sub"]
    seen["logout"] = after(provider.admin("POST", f"/users/{user_id}/logout"), logged_out)
    ended = refusal(400, "invalid_grant", "Session not active")
    assert seen == {
        "again": (200, 200, 200),
        "unknown scope": refusal(400, "invalid_scope", "Invalid scopes: openid unheard-of"),
        "revoke refresh": (200, ended, 401),
        "revoke access": (200, 200, 401),
        "revoke garbage": (200, {"error": "invalid_token", "error_description": "Invalid token"}),
        "logout": (204, ended, 401),
    }
