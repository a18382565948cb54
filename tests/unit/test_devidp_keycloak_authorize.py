"""The Keycloak flavour's authorization endpoint refuses as Keycloak 26.7 does, and asks for
consent once per scope set (probed on the real server; tests/e2e/test_provider_a_parity.py holds
both to the same assertions end to end)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from unit.devidp_support import KC, open_keycloak

AUTH = "/realms/master/protocol/openid-connect/auth"
REDIRECT = "http://127.0.0.1:5555/callback"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


@pytest.fixture
def kc():
    with open_keycloak() as (http, _):
        client = http.post(
            "/realms/master/clients-registrations/openid-connect",
            json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
        ).json()["client_id"]
        yield http, client


def params(client: str, **extra: str) -> dict[str, str]:
    return {
        "response_type": "code",
        "client_id": client,
        "redirect_uri": REDIRECT,
        "scope": "openid",
        "state": "st-1",
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        **extra,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"client_id": "nope"}, "Client not found."),
        ({"redirect_uri": "http://evil.example/cb"}, "Invalid parameter: redirect_uri"),
        ({"redirect_uri": ""}, "Invalid parameter: redirect_uri"),
    ],
)
def test_an_unknown_client_or_redirect_uri_gets_a_page_not_a_redirect(kc, change, message):
    http, client = kc
    page = http.get(AUTH, params=params(client, **change))
    assert (page.status_code, "location" in page.headers) == (400, False)
    assert message in page.text


@pytest.mark.parametrize("scope", ["openid bogus", "", "openid mcp"])
def test_a_scope_the_client_does_not_have_goes_back_as_invalid_scope(kc, scope):
    http, client = kc
    answer = http.get(AUTH, params=params(client, scope=scope))
    assert answer.status_code == 302
    assert parse_qs(urlsplit(answer.headers["location"]).query, keep_blank_values=True) == {
        "error": ["invalid_scope"],
        "error_description": [f"Invalid scopes: {scope}"],
        "state": ["st-1"],
        "iss": [f"{KC}/realms/master"],
    }


def pages_met(http: TestClient, client: str, scope: str, decision: str = "allow") -> tuple:
    """The pages a sign-in meets (login, consent) and the query it returns with."""
    met = []
    location = http.get(AUTH, params=params(client, scope=scope)).headers["location"]
    for _ in range(6):
        if location.startswith(REDIRECT):
            return met, parse_qs(urlsplit(location).query)
        page = http.get(location)
        if page.status_code == 303:
            location = page.headers["location"]
            continue
        if 'value="login"' in page.text:
            met.append("login")
            form = {"prompt": "login", "login": "admin", "password": "pw"}
        else:
            met.append("consent")
            form = {"prompt": "consent", "decision": decision}
        location = http.post(location, data=form).headers["location"]
    raise AssertionError(f"no redirect back after {met}")


def test_consent_is_asked_once_per_scope_set_and_a_denial_has_no_description(kc):
    http, client = kc
    assert pages_met(http, client, "openid")[0] == ["login", "consent"]
    assert pages_met(http, client, "openid")[0] == ["login"]
    assert pages_met(http, client, "openid phone")[0] == ["login", "consent"]
    met, query = pages_met(http, client, "openid email", decision="deny")
    assert (met, query) == (
        ["login", "consent"],
        {"error": ["access_denied"], "state": ["st-1"], "iss": [f"{KC}/realms/master"]},
    )
