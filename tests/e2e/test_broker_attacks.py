"""Broker mode against the attacks an outside tester found, each as a class: redirect URIs that
browsers read differently, the browser pages under CORS, consent posted from another site,
refresh tokens used by another client or twice, repeated parameters."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from headless_login import sign_in

from broker_calls import VERIFIER, authorize_url, redeem, register

REGISTERED = "http://127.0.0.1/cb"
EVIL = "https://evil.example"

# Each is read by browsers (WHATWG URL Standard) as something else than it looks, or carries
# what a redirect URI must not: none may be redirected to, whatever else the request says.
MISREAD = [
    "http://evil.example\\@127.0.0.1/cb",  # backslash: browsers go to evil.example
    "http://evil.example\\.127.0.0.1/cb",
    "http://127.0.0.1\\@evil.example/cb",
    "http://evil.example@127.0.0.1/cb",  # userinfo
    "http://127.0.0.1:80@evil.example/cb",
    "http://127.0.0.1/cb#@evil.example",  # fragment
    "http://127.0.0.1/c\tb",  # a tab browsers drop
    "http://127.0.0.1/cb\r\nSet-Cookie: a=b",  # CR/LF: header injection
    "http://127.0.0.1/cb\x00",
    " http://127.0.0.1/cb",
    "http://127.1/cb",  # IPv4 shorthand
    "http://0x7f.0.0.1/cb",
    "http://2130706433/cb",
    "HTTP://127.0.0.1/cb",  # not canonical
    "http://127.0.0.1/x/../cb",  # dot segments
    "http://127.0.0.1/%2e%2e/cb",
    "http://127.0.0.1%2f@evil.example/cb",
    "http://[::ffff:127.0.0.1]/cb",
    "javascript://127.0.0.1/%0aalert(1)",
    "http://evil.example/cb",  # plain http off loopback
]


@pytest.mark.parametrize("uri", MISREAD)
def test_misread_redirect_uris_are_never_redirected_to(broker_b, uri):
    client_id = register(broker_b, REGISTERED)
    # response_type=token would be answered with an error redirect if the URI were accepted.
    for extra in ({}, {"response_type": "token"}):
        response = httpx.get(authorize_url(broker_b, client_id, uri, **extra))
        assert response.status_code == 400, (uri, response.status_code, response.text)
        assert "location" not in response.headers
        assert response.json()["error"] == "invalid_request"


@pytest.mark.parametrize("uri", MISREAD)
def test_registration_refuses_misread_redirect_uris(broker_b, stack_b, uri):
    for stack in (broker_b, stack_b):  # the Broker and the ProviderB facade
        response = httpx.post(
            f"{stack.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
            json={"redirect_uris": [uri]},
        )
        assert response.status_code == 400, (uri, response.text)
        assert response.json()["error"] == "invalid_redirect_uri"


def test_registration_names_what_browsers_read(broker_b):
    response = httpx.post(
        f"{broker_b.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
        json={"redirect_uris": ["http://127.1/cb"]},
    )
    assert "'http://127.0.0.1/cb'" in response.json()["error_description"]


def test_an_error_is_redirected_only_to_the_registered_uri(broker_b):
    client_id = register(broker_b, REGISTERED)
    response = httpx.get(
        authorize_url(broker_b, client_id, "http://127.0.0.1:4000/cb", response_type="token")
    )
    assert response.status_code == 302
    location = urlsplit(response.headers["location"])
    assert (location.scheme, location.netloc, location.path) == ("http", "127.0.0.1:4000", "/cb")
    assert parse_qs(location.query)["error"] == ["unsupported_response_type"]


def test_loopback_port_may_vary_but_nothing_else(broker_b):
    client_id = register(broker_b, REGISTERED)
    assert (
        httpx.get(authorize_url(broker_b, client_id, "http://127.0.0.1:5123/cb")).status_code == 200
    )
    for other in (
        "http://localhost:5123/cb",
        "http://127.0.0.1:5123/cb2",
        "http://127.0.0.1:5123/cb?x=1",
        "https://127.0.0.1/cb",
    ):
        response = httpx.get(authorize_url(broker_b, client_id, other))
        assert response.status_code == 400, other
        assert "not registered for this client" in response.json()["error_description"]


def test_errors_before_the_redirect_uri_is_trusted_are_pages_for_browsers(broker_b):
    client_id = register(broker_b, REGISTERED)
    response = httpx.get(
        authorize_url(broker_b, client_id, MISREAD[0]),
        headers={"Accept": "text/html,application/xhtml+xml"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    assert "backslash" in response.text
    assert "location" not in response.headers


def test_repeated_parameters_are_refused(broker_b):
    client_id = register(broker_b, REGISTERED)
    url = (
        authorize_url(broker_b, client_id, REGISTERED)
        + "&"
        + urlencode({"redirect_uri": "http://127.0.0.1:9/other"})
    )
    response = httpx.get(url)
    assert response.status_code == 400
    assert "'redirect_uri' appears more than once" in response.json()["error_description"]
    token = httpx.post(
        f"{broker_b.gateway}/mcp/oauth/token",
        content="grant_type=authorization_code&code=a&code=b",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert token.status_code == 400
    assert "'code' appears more than once" in token.json()["error_description"]


# --- the browser pages are outside the route's CORS ------------------------------------------


def test_browser_pages_are_not_readable_cross_origin(broker_b):
    client_id = register(broker_b, REGISTERED)
    page = httpx.get(authorize_url(broker_b, client_id, REGISTERED), headers={"Origin": EVIL})
    assert page.status_code == 200
    assert "access-control-allow-origin" not in page.headers
    assert "access-control-allow-credentials" not in page.headers
    preflight = httpx.options(
        f"{broker_b.gateway}/mcp/oauth/authorize",
        headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    callback = httpx.get(
        f"{broker_b.gateway}/mcp/oauth/callback", params={"state": "x"}, headers={"Origin": EVIL}
    )
    assert "access-control-allow-origin" not in callback.headers
    # What MCP clients call from browsers keeps the route's CORS.
    for path in ("/.well-known/oauth-authorization-server/mcp", "/mcp/oauth/token"):
        response = httpx.request(
            "GET" if "well-known" in path else "POST",
            broker_b.gateway + path,
            headers={"Origin": EVIL},
        )
        assert response.headers["access-control-allow-origin"] == EVIL, path


def _consent_request(broker_b, browser: httpx.Client) -> str:
    client_id = register(broker_b, REGISTERED)
    page = browser.get(authorize_url(broker_b, client_id, REGISTERED))
    return page.text.split('name="request" value="')[1].split('"')[0]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": EVIL},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1"},  # same host, another port: another origin
        {},  # neither Origin nor Fetch Metadata
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": EVIL, "Sec-Fetch-Site": "same-origin"},
    ],
    ids=[
        "other-site",
        "null",
        "other-port",
        "none",
        "fetch-metadata-cross-site",
        "origin-wins-over-fetch-metadata",
    ],
)
def test_consent_posted_from_elsewhere_is_refused_and_consumes_nothing(broker_b, headers):
    with httpx.Client() as browser:
        request_id = _consent_request(broker_b, browser)
        forged = browser.post(
            f"{broker_b.gateway}/mcp/oauth/authorize",
            headers=headers,
            data={"request": request_id, "decision": "allow"},
        )
        assert forged.status_code == 403, forged.text
        assert forged.json()["error"] == "access_denied"
        assert "location" not in forged.headers
        # The user's own answer still works: the forged post used up nothing.
        mine = browser.post(
            f"{broker_b.gateway}/mcp/oauth/authorize",
            headers={"Origin": broker_b.gateway},
            data={"request": request_id, "decision": "allow"},
        )
        assert mine.status_code == 302, mine.text
        assert mine.headers["location"].startswith(broker_b.idp)


def test_consent_without_origin_is_accepted_with_same_origin_fetch_metadata(broker_b):
    with httpx.Client() as browser:
        request_id = _consent_request(broker_b, browser)
        response = browser.post(
            f"{broker_b.gateway}/mcp/oauth/authorize",
            headers={"Sec-Fetch-Site": "same-origin"},
            data={"request": request_id, "decision": "allow"},
        )
        assert response.status_code == 302, response.text


def test_consent_page_lets_browsers_send_the_real_origin(broker_b):
    client_id = register(broker_b, REGISTERED)
    page = httpx.get(authorize_url(broker_b, client_id, REGISTERED))
    # no-referrer would make browsers post the form with `Origin: null`.
    assert page.headers["referrer-policy"] == "same-origin"


# --- refresh tokens: bound to their client, rotated, reuse revokes ---------------------------


async def _tokens(broker_b, client_id: str) -> dict:
    url = authorize_url(
        broker_b, client_id, REGISTERED, scope="openid profile offline_access", prompt="consent"
    )
    query = await sign_in(url, "alice", "x", REGISTERED)
    response = redeem(broker_b, client_id, query["code"], VERIFIER, REGISTERED)
    assert response.status_code == 200, response.text
    tokens = response.json()
    assert "refresh_token" in tokens, tokens
    return tokens


def _refresh(broker_b, token: str, client_id: str | None) -> httpx.Response:
    form = {"grant_type": "refresh_token", "refresh_token": token}
    if client_id is not None:
        form["client_id"] = client_id
    return httpx.post(f"{broker_b.gateway}/mcp/oauth/token", data=form)


async def test_refresh_token_is_bound_to_its_client(broker_b):
    alice_app, other_app = register(broker_b, REGISTERED), register(broker_b, REGISTERED)
    refresh = (await _tokens(broker_b, alice_app))["refresh_token"]
    stolen = _refresh(broker_b, refresh, other_app)
    assert stolen.status_code == 400
    assert stolen.json()["error"] == "invalid_grant"
    assert "another client" in stolen.json()["error_description"]
    anonymous = _refresh(broker_b, refresh, None)
    assert (anonymous.status_code, anonymous.json()["error"]) == (400, "invalid_client")
    unknown = _refresh(broker_b, refresh, "mcpgw.not-a-client.sig")
    assert (unknown.status_code, unknown.json()["error"]) == (400, "invalid_client")
    # None of that used the token up: its own client still refreshes.
    mine = _refresh(broker_b, refresh, alice_app)
    assert mine.status_code == 200, mine.text
    assert mine.json()["access_token"]


async def test_refresh_tokens_rotate_and_reuse_revokes_the_sign_in(broker_b):
    client_id = register(broker_b, REGISTERED)
    first = (await _tokens(broker_b, client_id))["refresh_token"]
    second = _refresh(broker_b, first, client_id)
    assert second.status_code == 200, second.text
    rotated = second.json()["refresh_token"]
    assert rotated != first
    replay = _refresh(broker_b, first, client_id)
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert "already exchanged" in replay.json()["error_description"]


async def test_reuse_of_a_rotated_token_revokes_the_current_one(broker_b):
    client_id = register(broker_b, REGISTERED)
    first = (await _tokens(broker_b, client_id))["refresh_token"]
    current = _refresh(broker_b, first, client_id).json()["refresh_token"]
    assert _refresh(broker_b, first, client_id).status_code == 400  # the thief, say
    revoked = _refresh(broker_b, current, client_id)
    assert revoked.status_code == 400
    assert revoked.json()["error"] == "invalid_grant"
