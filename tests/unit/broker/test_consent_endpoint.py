"""The consent page's answer, a POST to the authorization endpoint
(`broker/consent_endpoint.py`): allowed, the browser goes on to the provider with the gateway's
own PKCE and state and the consent is remembered in the route's cookie (unless the redirect URI
could be received by another program on the device); denied, it goes back to the client. Forms
from other sites, other browsers and answered requests are refused before anything is used up."""

from __future__ import annotations

from mcp_oauth_gateway import pkce

from .broker_support import (
    REDIRECT,
    WEB_REDIRECT,
    Rig,
    answer,
    consent_cookie,
    consent_page,
    cookie_value,
    error_of,
    redirected,
    register,
    started_rig,
)


async def test_allowing_sends_the_browser_to_the_provider_as_the_gateways_client(rig: Rig):
    client_id = await register(rig, WEB_REDIRECT)
    request, browser = await consent_page(
        rig, client_id, login_hint="alice", redirect_uri=WEB_REDIRECT
    )
    response = await answer(rig, request, browser)
    where, params = redirected(response)
    assert where == "http://idp0.test/authorize"
    state = params.pop("state")
    challenge = params.pop("code_challenge")
    assert params == {
        "response_type": "code",
        "client_id": "gateway-at-0",
        "redirect_uri": "http://gw.test/mcp/oauth/callback",
        "scope": "openid profile",
        "code_challenge_method": "S256",
        "resource": "http://gw.test/mcp",
        "login_hint": "alice",
    }
    upstream = await rig.context().state.take_upstream(state)
    assert upstream is not None
    assert pkce.s256(upstream.verifier) == challenge
    assert upstream.callback == "http://gw.test/mcp/oauth/callback"
    name = consent_cookie(rig)
    assert name == f"mcp-consent-{rig.context().route[:16]}"  # the route's own cookie
    consented = cookie_value(response, name)
    assert response.header(b"set-cookie") == (
        f"{name}={consented}; Path=/; HttpOnly; SameSite=Lax; Max-Age=2592000".encode()
    )


async def test_allowing_a_loopback_client_remembers_nothing(rig: Rig):
    request, browser = await consent_page(rig, await register(rig))  # http://127.0.0.1:47001
    response = await answer(rig, request, browser)
    assert redirected(response)[0] == "http://idp0.test/authorize"
    assert response.header(b"set-cookie") is None


async def test_the_resource_is_kept_from_a_provider_that_does_not_take_it():
    async with started_rig(forwards_resource=False) as rig:
        request, browser = await consent_page(rig, await register(rig))
        _, params = redirected(await answer(rig, request, browser))
        assert "resource" not in params


async def test_denying_goes_back_to_the_client_with_access_denied(rig: Rig):
    request, browser = await consent_page(rig, await register(rig))
    where, params = redirected(await answer(rig, request, browser, decision="deny"))
    assert where == REDIRECT
    assert params == {
        "error": "access_denied",
        "error_description": "the user denied the request",
        "iss": "http://gw.test/mcp",
        "state": "client-state",
    }


async def test_a_form_from_another_site_is_refused_and_uses_nothing_up(rig: Rig):
    request, browser = await consent_page(rig, await register(rig))
    foreign = await answer(rig, request, browser, headers=[(b"origin", b"https://evil.test")])
    assert foreign.header(b"location") is None
    assert error_of(foreign) == (
        403,
        "access_denied",
        "the consent form was posted from 'https://evil.test', not from the gateway's own "
        "origin 'http://gw.test'",
    )
    unmarked = await answer(rig, request, browser, headers=[])
    assert error_of(unmarked)[:2] == (403, "access_denied")
    # Fetch Metadata stands in for a missing Origin; the request was still pending.
    fetched = await answer(rig, request, browser, headers=[(b"sec-fetch-site", b"same-origin")])
    assert fetched.status == 302


async def test_an_answered_request_cannot_be_answered_again(rig: Rig):
    request, browser = await consent_page(rig, await register(rig))
    assert (await answer(rig, request, browser)).status == 302
    for replayed in (request, "never-issued"):
        assert error_of(await answer(rig, replayed, browser)) == (
            400,
            "invalid_request",
            "unknown, expired or already answered authorization request; start the sign-in again",
        )


async def test_a_consent_from_another_browser_is_refused(rig: Rig):
    request, _ = await consent_page(rig, await register(rig))
    assert error_of(await answer(rig, request, "another-browser")) == (
        400,
        "invalid_request",
        "this consent was not given in the browser that started the sign-in; start again",
    )


async def test_the_provider_must_be_named_when_there_is_a_choice():
    async with started_rig(("Corp", "Partner")) as rig:
        client_id = await register(rig)
        request, browser = await consent_page(rig, client_id)
        assert error_of(await answer(rig, request, browser)) == (
            400,
            "invalid_request",
            "choose the identity provider to sign in with; start the sign-in again",
        )
        request, browser = await consent_page(rig, client_id)
        where, params = redirected(await answer(rig, request, browser, decision="allow-1"))
        assert (where, params["client_id"]) == ("http://idp1.test/authorize", "gateway-at-1")
        request, browser = await consent_page(rig, client_id)
        out_of_range = await answer(rig, request, browser, decision="allow-2")
        assert error_of(out_of_range)[:2] == (400, "invalid_request")


async def test_a_provider_without_a_usable_authorization_endpoint_is_502(rig: Rig):
    request, browser = await consent_page(rig, await register(rig))
    document = rig.discoveries[0].document
    assert document is not None
    document["authorization_endpoint"] = "javascript:alert(1)"
    assert error_of(await answer(rig, request, browser)) == (
        502,
        "server_error",
        "the identity provider's metadata has no usable authorization_endpoint (an http or "
        "https URL)",
    )


async def test_a_provider_whose_metadata_is_unavailable_is_502(rig: Rig):
    request, browser = await consent_page(rig, await register(rig))
    rig.discoveries[0].document = None
    status, error, description = error_of(await answer(rig, request, browser))
    assert (status, error) == (502, "temporarily_unavailable")
    assert description.startswith("the identity provider's metadata is unavailable: ")
