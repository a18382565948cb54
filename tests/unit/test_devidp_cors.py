"""CORS in each flavour of the dev IdP, as the real servers send it: Keycloak 26.7 (probed:
preflights for every origin, the token endpoint held to the client's web origins with 403
`Invalid origin`, registration from a browser only for origins its policy lists) and authentik
(`cors_allow` with the provider's redirect-URI origins; `*` on the key set)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.provider_kinds import ProviderKind
from unit.devidp_support import TOKEN, open_keycloak

AK = "http://127.0.0.1:9000"
REGISTER = "/realms/master/clients-registrations/openid-connect"
INSPECTOR = "http://localhost:6274"
EVIL = "http://evil.example"
KC_ALLOW_HEADERS = (
    "Origin, Access-Control-Request-Method, X-Requested-With, Accept, "
    "Access-Control-Request-Headers, DPoP, Content-Type, Authorization"
)


def cors(response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


@pytest.fixture
def kc():
    with open_keycloak() as (http, _):
        yield http


def register(http: TestClient, **body) -> dict:
    answer = http.post(
        REGISTER,
        json={
            "redirect_uris": [f"{INSPECTOR}/oauth/callback"],
            "token_endpoint_auth_method": "none",
            **body,
        },
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


@pytest.mark.parametrize(
    ("path", "methods"),
    [
        (TOKEN, "POST, OPTIONS"),
        (REGISTER, "DELETE, POST, GET, OPTIONS, PUT"),
        ("/realms/master/protocol/openid-connect/userinfo", "GET, HEAD, OPTIONS"),
        ("/realms/master/.well-known/openid-configuration", "GET"),
    ],
)
def test_keycloak_answers_every_preflight_for_every_origin(kc, path, methods):
    preflight = kc.options(path, headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 200
    assert cors(preflight) == {
        "access-control-allow-origin": EVIL,
        "access-control-allow-methods": methods,
        "access-control-allow-credentials": "true",
        "access-control-allow-headers": KC_ALLOW_HEADERS,
        "access-control-max-age": "3600",
    }
    bare = kc.options(path)
    assert (bare.status_code, cors(bare)) == (200, {})


def test_keycloak_token_endpoint_allows_the_clients_web_origins_only(kc):
    client = register(kc)
    form = {"grant_type": "authorization_code", "client_id": client["client_id"], "code": "x"}
    allowed = kc.post(TOKEN, data=form, headers={"Origin": INSPECTOR})
    assert (allowed.status_code, allowed.json()["error_description"]) == (400, "Code not valid")
    assert cors(allowed) == {
        "access-control-allow-origin": INSPECTOR,
        "access-control-allow-credentials": "true",
        "access-control-expose-headers": "Access-Control-Allow-Methods",
    }
    refused = kc.post(TOKEN, data=form, headers={"Origin": EVIL})
    assert (refused.status_code, refused.json(), cors(refused)) == (
        403,
        {"error": "Invalid origin"},
        {},
    )
    # A failed client authentication echoes any origin; an unknown grant type none.
    unknown = kc.post(TOKEN, data={**form, "client_id": "nope"}, headers={"Origin": EVIL})
    assert (unknown.status_code, cors(unknown)["access-control-allow-origin"]) == (401, EVIL)
    bogus = kc.post(TOKEN, data={**form, "grant_type": "bogus"}, headers={"Origin": INSPECTOR})
    assert (bogus.status_code, bogus.json()["error"], cors(bogus)) == (
        400,
        "unsupported_grant_type",
        {},
    )


def test_keycloak_registration_from_a_browser_needs_the_web_origins_policy(kc):
    body = {"redirect_uris": [f"{INSPECTOR}/cb"], "token_endpoint_auth_method": "none"}
    refused = kc.post(REGISTER, json=body, headers={"Origin": INSPECTOR})
    assert (refused.status_code, refused.json(), cors(refused)) == (
        403,
        {"error": "Invalid origin"},
        {},
    )
    assert kc.post(REGISTER, json=body).status_code == 201


# --- authentik ------------------------------------------------------------------------------


@pytest.fixture
def ak():
    app = create_app(DevIdpSettings(kind=ProviderKind.AUTHENTIK, bootstrap_token="tok"))
    with TestClient(app, base_url=AK, follow_redirects=False) as http:
        http.headers["Authorization"] = "Bearer tok"
        flows = {f["slug"]: f["pk"] for f in http.get("/api/v3/flows/instances/").json()["results"]}
        provider = http.post(
            "/api/v3/providers/oauth2/",
            json={
                "name": "mcp",
                "authorization_flow": flows["default-provider-authorization-implicit-consent"],
                "invalidation_flow": flows["default-invalidation-flow"],
                "client_type": "public",
                "redirect_uris": [
                    {"matching_mode": "strict", "url": f"{INSPECTOR}/oauth/callback"}
                ],
            },
        ).json()
        app_answer = http.post(
            "/api/v3/core/applications/",
            json={"name": "mcp", "slug": "mcp", "provider": provider["pk"]},
        )
        assert app_answer.status_code == 201
        del http.headers["Authorization"]
        yield http, provider["client_id"]


def test_authentik_allows_the_providers_redirect_uri_origins(ak):
    http, client_id = ak
    form = {"grant_type": "authorization_code", "client_id": client_id, "code": "x"}
    allowed = http.post("/application/o/token/", data=form, headers={"Origin": INSPECTOR})
    assert allowed.status_code == 400
    assert cors(allowed) == {
        "access-control-allow-origin": INSPECTOR,
        "access-control-allow-credentials": "true",
    }
    assert allowed.headers["vary"] == "Origin"
    other = http.post("/application/o/token/", data=form, headers={"Origin": EVIL})
    assert (other.status_code, cors(other)) == (400, {})
    discovery = http.get(
        "/application/o/mcp/.well-known/openid-configuration", headers={"Origin": INSPECTOR}
    )
    assert cors(discovery)["access-control-allow-origin"] == INSPECTOR


def test_authentik_answers_options_for_every_origin_and_stars_the_key_set(ak):
    http, _ = ak
    preflight = http.options(
        "/application/o/token/",
        headers={
            "Origin": EVIL,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert (preflight.status_code, preflight.json()) == (200, {})
    assert cors(preflight) == {
        "access-control-allow-origin": EVIL,
        "access-control-allow-credentials": "true",
        "access-control-allow-headers": "content-type",
        "access-control-allow-methods": "GET, POST, OPTIONS",
    }
    jwks = http.get("/application/o/mcp/jwks/", headers={"Origin": EVIL})
    assert cors(jwks) == {"access-control-allow-origin": "*"}
