"""The Broker's authorization endpoint, GET (`broker/authorize_endpoint.py`): a request checked,
then the consent page or, when this browser already allowed exactly this request (client,
redirect URI, set of scopes, provider, route) for a redirect URI only the client receives,
straight on to the provider. Until the redirect URI is known to be the client's, errors are
answered in place; after that they go back to the client with `iss` (RFC 9207) and the client's
state."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.broker import consent
from mcp_oauth_gateway.broker.consent_endpoint import remembered_as
from mcp_oauth_gateway.broker.state import PENDING_TTL

from .broker_support import (
    AUTHORIZE,
    REDIRECT,
    WEB_REDIRECT,
    Rig,
    answer,
    authorize,
    authorize_query,
    consent_cookie,
    consent_page,
    cookie_value,
    error_of,
    redirected,
    register,
    request_id,
    started_rig,
)


async def test_a_valid_request_is_answered_with_the_consent_page(rig: Rig):
    client_id = await register(rig, name="Inspector")
    page = await authorize(rig, client_id)
    assert page.status == 200
    assert page.header(b"content-type") == b"text/html; charset=utf-8"
    assert page.header(b"cache-control") == b"no-store"
    assert page.header(b"x-frame-options") == b"DENY"
    # The form may lead to the provider (allow) or back to the client (deny), nowhere else.
    assert page.header(b"content-security-policy") == (
        b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self' "
        b"http://idp0.test http://127.0.0.1:47001; frame-ancestors 'none'"
    )
    browser = cookie_value(page, "mcp-authz")
    assert page.header(b"set-cookie") == (
        f"mcp-authz={browser}; Path=/; HttpOnly; SameSite=Lax; Max-Age={PENDING_TTL}".encode()
    )
    text = page.body.decode()
    assert "<b>Inspector</b>" in text
    assert "MCP server: <span class=host>http://gw.test/mcp</span>" in text  # which one
    assert f'action="{AUTHORIZE}"' in text
    assert "<li>openid</li><li>profile</li>" in text
    assert 'value="allow"' in text  # one provider: nothing to choose
    pending = await rig.context().state.take_pending(request_id(page))
    assert pending is not None
    assert (pending.client_id, pending.redirect_uri, pending.state) == (
        client_id,
        REDIRECT,
        "client-state",
    )
    assert (pending.scope, pending.resource, pending.browser) == (
        "openid profile",
        "http://gw.test/mcp",
        browser,
    )


async def test_no_scope_asks_for_every_supported_one(rig: Rig):
    request, _ = await consent_page(rig, await register(rig), scope=None)
    pending = await rig.context().state.take_pending(request)
    assert pending is not None
    assert pending.scope == "openid profile"


async def test_a_browser_that_allowed_exactly_this_request_goes_straight_to_the_provider(
    rig: Rig,
):
    client_id = await register(rig, [WEB_REDIRECT, WEB_REDIRECT + "2"])
    web = {"redirect_uri": WEB_REDIRECT}
    request, browser = await consent_page(rig, client_id, **web)
    name = consent_cookie(rig)
    consented = (
        f"mcp-authz={browser}; {name}={cookie_value(await answer(rig, request, browser), name)}"
    )
    for scope in ("openid profile", "profile openid", "openid profile openid"):  # one set
        again = await authorize(rig, client_id, cookie=consented, scope=scope, **web)
        where, params = redirected(again)
        assert where == "http://idp0.test/authorize"
        assert params["client_id"] == "gateway-at-0"
        assert again.header(b"set-cookie") is None
    # Anything else is asked again: a wider or a narrower set of scopes (no scope: every
    # supported one, here the same set), another redirect URI, another client.
    asked = [
        await authorize(rig, client_id, cookie=consented, scope="openid profile email", **web),
        await authorize(rig, client_id, cookie=consented, scope="openid", **web),
        await authorize(rig, client_id, cookie=consented, redirect_uri=WEB_REDIRECT + "2"),
        await authorize(rig, await register(rig, WEB_REDIRECT), cookie=consented, **web),
    ]
    assert [page.status for page in asked] == [200] * 4
    assert (await authorize(rig, client_id, cookie=consented, scope=None, **web)).status == 302
    # The signature is hex: its last digit changed (to "0", or from "0" to "1": a cookie
    # ending in "0" kept as it was would not be tampered at all, one run in sixteen).
    forged = consented[:-1] + ("1" if consented.endswith("0") else "0")
    tampered = await authorize(rig, client_id, cookie=forged, **web)
    assert tampered.status == 200


@pytest.mark.parametrize(
    "redirect",
    [
        "http://127.0.0.1:47001/cb",
        "http://localhost:47001/cb",
        "http://[::1]:47001/cb",
        "https://127.0.0.1:8443/cb",
        "https://app.localhost/cb",
        "https://[::ffff:7f00:1]/cb",
        "com.example.app:/cb",
    ],
)
async def test_consent_for_a_redirect_another_program_could_receive_is_asked_every_time(
    rig: Rig, redirect: str
):
    client_id = await register(rig, redirect)
    page = await authorize(rig, client_id, redirect_uri=redirect)
    context = rig.context()
    pending = await context.state.take_pending(request_id(page))
    assert pending is not None
    # A cookie listing this very request, as the gateway would write it for an https client
    # (the control: the same cookie for an https redirect is remembered).
    cookie = f"{consent_cookie(rig)}=" + consent.write_consent(
        await rig.store.secret(), [remembered_as(context, pending)]
    )
    again = await authorize(rig, client_id, cookie=cookie, redirect_uri=redirect)
    assert again.status == 200, again.headers
    request, browser = await consent_page(rig, client_id, redirect_uri=redirect)
    allowed = await answer(rig, request, browser)
    assert redirected(allowed)[0] == "http://idp0.test/authorize"
    assert allowed.header(b"set-cookie") is None  # nothing remembered


async def test_a_cookie_listing_an_https_request_is_read(rig: Rig):
    """The control of the test above: the same forged-by-the-gateway cookie for an https
    redirect URI skips the page."""
    client_id = await register(rig, WEB_REDIRECT)
    page = await authorize(rig, client_id, redirect_uri=WEB_REDIRECT)
    context = rig.context()
    pending = await context.state.take_pending(request_id(page))
    assert pending is not None
    cookie = f"{consent_cookie(rig)}=" + consent.write_consent(
        await rig.store.secret(), [remembered_as(context, pending)]
    )
    again = await authorize(rig, client_id, cookie=cookie, redirect_uri=WEB_REDIRECT)
    assert again.status == 302


async def test_an_unknown_client_is_answered_in_place(rig: Rig):
    response = await authorize(rig, "not-registered")
    assert response.header(b"location") is None
    assert error_of(response) == (
        400,
        "invalid_client",
        "client_id 'not-registered' is not registered with this gateway (register through the "
        "registration_endpoint or use a client metadata document URL)",
    )


async def test_errors_in_place_are_a_page_for_browsers(rig: Rig):
    response = await rig.call(
        "GET",
        AUTHORIZE,
        query=authorize_query("not-registered"),
        headers=[(b"accept", b"text/html,application/xhtml+xml")],
    )
    assert response.status == 400
    assert response.header(b"content-type") == b"text/html; charset=utf-8"
    assert b"<b>invalid_client</b>" in response.body
    assert response.header(b"content-security-policy") == (
        b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"
    )


@pytest.mark.parametrize(
    ("redirect", "description"),
    [
        (
            "http://127.0.0.1:47001/elsewhere",
            "redirect_uri 'http://127.0.0.1:47001/elsewhere' is not registered for this client "
            "(registered: ['http://127.0.0.1:47001/cb'])",
        ),
        (None, None),
    ],
)
async def test_a_redirect_uri_that_is_not_the_clients_is_answered_in_place(
    rig: Rig, redirect, description
):
    response = await authorize(rig, await register(rig), redirect_uri=redirect)
    assert response.header(b"location") is None
    status, error, said = error_of(response)
    assert (status, error) == (400, "invalid_request")
    if description is not None:
        assert said == description


@pytest.mark.parametrize(
    ("changes", "error", "description"),
    [
        (
            {"response_type": "token"},
            "unsupported_response_type",
            "only response_type=code is supported",
        ),
        (
            {"code_challenge_method": "plain"},
            "invalid_request",
            "PKCE is required: code_challenge with code_challenge_method=S256",
        ),
        (
            {"code_challenge": None},
            "invalid_request",
            "PKCE is required: code_challenge with code_challenge_method=S256",
        ),
        (
            {"code_challenge": "short"},
            "invalid_request",
            "PKCE is required: code_challenge with code_challenge_method=S256",
        ),
        (
            {"resource": "http://elsewhere.test/mcp"},
            "invalid_target",
            "resource 'http://elsewhere.test/mcp' is not served here; this authorization "
            "server issues tokens for 'http://gw.test/mcp' only",
        ),
    ],
)
async def test_other_errors_go_back_to_the_client_with_iss_and_state(
    rig: Rig, changes, error, description
):
    where, params = redirected(await authorize(rig, await register(rig), **changes))
    assert where == REDIRECT
    assert params == {
        "error": error,
        "error_description": description,
        "iss": "http://gw.test/mcp",
        "state": "client-state",
    }


async def test_a_scope_that_is_not_scope_tokens_goes_back_to_the_client(rig: Rig):
    where, params = redirected(
        await authorize(rig, await register(rig), scope='openid "profile"', state=None)
    )
    assert where == REDIRECT
    assert params["error"] == "invalid_scope"
    assert "state" not in params


async def test_a_repeated_parameter_is_refused_in_place(rig: Rig):
    query = authorize_query(await register(rig)) + b"&state=second"
    response = await rig.call("GET", AUTHORIZE, query=query)
    assert error_of(response) == (
        400,
        "invalid_request",
        "the parameter 'state' appears more than once; send each parameter once (RFC 6749 §3.1)",
    )


async def test_other_methods_are_405_naming_get_and_post(rig: Rig):
    response = await rig.call("PUT", AUTHORIZE)
    assert error_of(response) == (405, "invalid_request", "use GET, POST")
    # RFC 9110 §15.5.6: a 405 names the methods it allows, on the page as in JSON.
    assert response.header(b"allow") == b"GET, POST"
    page = await rig.call("PUT", AUTHORIZE, headers=[(b"accept", b"text/html")])
    assert page.status == 405
    assert page.header(b"allow") == b"GET, POST"


async def test_the_page_still_shows_while_the_providers_metadata_is_unavailable(rig: Rig):
    rig.discoveries[0].document = None
    page = await authorize(rig, await register(rig))
    assert page.status == 200
    assert b"http://idp0.test" not in (page.header(b"content-security-policy") or b"")


async def test_with_several_providers_the_user_chooses_unless_a_hint_names_one():
    async with started_rig(("Corp", "Partner"), domains=((), ("partner.example",))) as rig:
        client_id = await register(rig)
        page = await authorize(rig, client_id)
        text = page.body.decode()
        assert 'value="allow-0">Allow, sign in with Corp' in text
        assert 'value="allow-1">Allow, sign in with Partner' in text
        assert b"http://idp0.test http://idp1.test" in (
            page.header(b"content-security-policy") or b""
        )
        hinted = await authorize(rig, client_id, login_hint="bob@partner.example")
        assert 'value="allow-1">Allow, sign in with Partner' in hinted.body.decode()
        assert b"sign in with Corp" not in hinted.body
