"""The Broker reads a client's `scope` as RFC 6749 §3.3 writes it, with a real gateway and
oidc-provider: anything but scope tokens separated by spaces is `invalid_scope` (redirected with
`iss` once the redirect URI is trusted, answered in place before), because the provider may cut
it elsewhere (authentik splits on every Unicode space) and grant what the consent page did not
show; what reaches the provider is exactly the tokens the consent page listed."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from headless_login import sign_in

from broker_calls import CALLBACK, authorize_url, redeem, register

# Each would make one item on the consent page and, at authentik, two scopes or more.
MALFORMED = {
    "nbsp": "openid\u00a0profile",
    "ideographic-space": "openid\u3000profile",
    "vertical-tab": "openid\x0bprofile",
    "next-line": "openid\x85profile",
    "tab": "openid\tprofile",
    "line-feed": "openid\nprofile",
    "line-separator": "openid\u2028profile",
    "quote": 'openid "profile"',
    "backslash": "openid profile\\",
    "nul": "openid\x00profile",
    "non-ascii": "openid prof\u00efle",
}
LISTED = re.compile(r"<li>([^<]*)</li>")


def _allowed(stack, url: str) -> tuple[list[str], httpx.Response]:
    """The scopes the consent page lists, and the redirect to the provider once allowed."""
    with httpx.Client() as browser:
        page = browser.get(url)
        assert page.status_code == 200, page.text
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        answer = browser.post(
            f"{stack.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow"},
            headers={"Origin": stack.gateway},
        )
    assert answer.status_code == 302, answer.text
    return LISTED.findall(page.text), answer


@pytest.mark.parametrize("scope", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_scope_goes_back_as_invalid_scope_with_iss(broker_b, scope):
    client_id = register(broker_b)
    answer = httpx.get(authorize_url(broker_b, client_id, scope=scope))
    assert answer.status_code == 302, answer.text
    location = answer.headers["location"]
    assert location.startswith(CALLBACK + "?"), location  # not to the provider
    query = parse_qs(urlsplit(location).query)
    assert query["error"] == ["invalid_scope"]
    assert query["iss"] == [f"{broker_b.gateway}/mcp"]
    assert query["state"] == ["client-state-1"]
    assert "RFC 6749 §3.3" in query["error_description"][0]


def test_a_malformed_scope_is_never_redirected_to_an_untrusted_uri(broker_b):
    client_id = register(broker_b)
    for redirect in ("http://127.0.0.1:47001/other", "https://evil.example/cb"):
        answer = httpx.get(
            authorize_url(broker_b, client_id, redirect, scope=MALFORMED["nbsp"]),
            headers={"Accept": "text/html"},
        )
        assert answer.status_code == 400, answer.text
        assert "location" not in answer.headers
        assert "not registered for this client" in answer.text


def test_the_provider_gets_the_tokens_the_consent_page_listed(broker_b):
    client_id = register(broker_b)
    # Runs of spaces are no ambiguity (every reader cuts at each): they are dropped, and the
    # provider, which would refuse them (oidc-provider does), gets single spaces.
    listed, answer = _allowed(
        broker_b, authorize_url(broker_b, client_id, scope=" openid  profile ")
    )
    assert listed == ["openid", "profile"]
    assert answer.headers["location"].startswith(broker_b.idp)
    upstream = parse_qs(urlsplit(answer.headers["location"]).query)
    assert upstream["scope"] == ["openid profile"]


async def test_a_well_formed_scope_signs_in_and_redeems(broker_b):
    client_id = register(broker_b)
    for scope in ("openid profile", "  openid   profile  "):
        query = await sign_in(
            authorize_url(broker_b, client_id, scope=scope), "alice", "x", CALLBACK
        )
        assert "code" in query, query
        tokens = redeem(broker_b, client_id, query["code"])
        assert tokens.status_code == 200, tokens.text
        assert set(tokens.json()["scope"].split(" ")) >= {"openid", "profile"}


def _refresh(stack, client_id: str, token: str, scope: str | None) -> httpx.Response:
    form = {"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id}
    if scope is not None:
        form["scope"] = scope
    return httpx.post(f"{stack.gateway}/mcp/oauth/token", data=form)


async def test_a_malformed_scope_at_the_token_endpoint_is_invalid_scope(broker_b):
    client_id = register(broker_b)
    url = authorize_url(broker_b, client_id, scope="openid profile offline_access")
    query = await sign_in(url, "alice", "x", CALLBACK)
    refresh = redeem(broker_b, client_id, query["code"]).json()["refresh_token"]
    for scope in (MALFORMED["nbsp"], MALFORMED["ideographic-space"], MALFORMED["quote"]):
        refused = _refresh(broker_b, client_id, refresh, scope)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "invalid_scope"
    # Refused before the refresh token was taken: it still refreshes, with the narrowed scope
    # passed on in single spaces (oidc-provider refuses an empty scope between two).
    narrowed = _refresh(broker_b, client_id, refresh, "openid  profile ")
    assert narrowed.status_code == 200, narrowed.text
    assert set(narrowed.json()["scope"].split(" ")) == {"openid", "profile"}


@pytest.mark.parametrize("scope", ["openid\u00a0profile", 'openid "x"', "openid\\x"])
def test_registration_refuses_a_malformed_scope(broker_b, stack_b, scope):
    for stack in (broker_b, stack_b):  # the Broker and the ProviderB facade
        response = httpx.post(
            f"{stack.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
            json={"redirect_uris": [CALLBACK], "scope": scope},
        )
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_client_metadata"
        assert "RFC 6749 §3.3" in response.json()["error_description"]
    ordinary = httpx.post(
        f"{broker_b.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
        json={"redirect_uris": [CALLBACK], "scope": "openid profile"},
    )
    assert ordinary.status_code == 201, ordinary.text
