"""Every Broker route is an authorization server of its own (`broker/binding.py`), even where
routes share a host, a store and its secret. `rig` is policy `default/unit` at /mcp; `other` is
another tenant's Broker route on the same host and store: another policy at another path, or
another policy naming the very same resource URL. A client registered at one route is
`invalid_client` at the other, naming the fix; a sign-in started at one cannot be finished at
the other; and for a client valid at both (a metadata document URL), a code, a refresh token, a
revocation or a consent of one route means nothing at the other, and stays good at its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from mcp_oauth_gateway.broker import clients

from .broker_support import (
    IDP_ISSUER,
    ORIGIN,
    REDIRECT,
    WEB_REDIRECT,
    Rig,
    answer,
    authorize,
    client_code,
    come_back,
    consent_cookie,
    consent_page,
    cookie_value,
    error_of,
    redeem,
    redirected,
    refresh,
    register,
    revoke,
    started_rig,
)

OTHERS = {
    "another path": ("tenant-b/mcp", "/b/mcp", None),
    "the same resource": ("tenant-b/mcp", "/mcp", "http://gw.test/mcp"),
}


@pytest.fixture(params=sorted(OTHERS))
def other(request: pytest.FixtureRequest, rig: Rig) -> Rig:
    """Another tenant's Broker route beside `rig`."""
    return rig.beside(*OTHERS[request.param])


@pytest.fixture
async def documents_rig() -> AsyncIterator[Rig]:
    """A rig whose Client ID Metadata Document (valid at every route) can be fetched."""
    async with started_rig(local_documents=True) as started:
        yield started


def registered_elsewhere(client_id: str, at: Rig) -> tuple[int, str, str]:
    """The answer a client registered at another route gets at `at`."""
    return (
        400,
        "invalid_client",
        f"client_id {client_id[:80]!r} was registered with another MCP server of this gateway, "
        f"not {at.resource}; register again through this server's registration_endpoint "
        f"{ORIGIN}{at.paths.mcp.registration_path}",
    )


async def test_a_client_registered_at_one_route_is_invalid_client_at_another(rig: Rig, other: Rig):
    client_id = await register(rig)
    expected = registered_elsewhere(client_id, other)
    assert error_of(await authorize(other, client_id)) == expected
    assert error_of(await redeem(other, client_id, "a-code")) == expected
    assert error_of(await refresh(other, client_id, "a-refresh-token")) == expected
    assert error_of(await revoke(other, client_id, "a-token")) == expected
    assert (await authorize(rig, client_id)).status == 200  # still its own route's client


async def test_a_client_registered_on_another_host_is_invalid_client_here(rig: Rig):
    """The same policy without a resource of its own serves one resource per host."""
    hosts = rig.beside("default/unit", "/mcp", None)
    body = orjson.dumps({"client_name": "c", "redirect_uris": [REDIRECT]})
    registered = await hosts.call("POST", hosts.paths.mcp.registration_path, body=body)
    client_id = registered.json()["client_id"]
    elsewhere = await hosts.call(
        "GET", hosts.paths.authorize_path, query=f"client_id={client_id}".encode(), host=b"b.test"
    )
    status, error, description = error_of(elsewhere)
    assert (status, error) == (400, "invalid_client")
    assert (
        "not http://b.test/mcp; register again through this server's registration_endpoint "
        "http://b.test/.well-known/oauth-authorization-server/mcp/client-registration"
        in description
    )


async def test_a_client_id_from_before_routes_is_told_to_register_again(rig: Rig):
    # As an earlier version signed them: no route in the record.
    body = clients._b64(orjson.dumps({"n": "Old", "r": [REDIRECT], "t": 1, "i": "x"}))
    client_id = f"{clients.DCR_PREFIX}{body}.{clients._sign(await rig.store.secret(), body)}"
    expected = (
        400,
        "invalid_client",
        f"client_id {client_id[:80]!r} was issued by an earlier version of this gateway, "
        "before client ids were bound to one MCP server; register again through this "
        "server's registration_endpoint "
        "http://gw.test/.well-known/oauth-authorization-server/mcp/client-registration",
    )
    assert error_of(await authorize(rig, client_id)) == expected
    assert error_of(await refresh(rig, client_id, "a-refresh-token")) == expected


async def test_a_sign_in_started_at_one_route_cannot_be_finished_at_another(rig: Rig, other: Rig):
    request, browser = await consent_page(rig, await register(rig))
    refused = await answer(other, request, browser)
    assert error_of(refused)[:2] == (400, "invalid_request")
    _, upstream = redirected(await answer(rig, request, browser))  # not used up there
    state = upstream["state"]
    back = await come_back(other, state=state, code="upstream-code", iss=IDP_ISSUER)
    assert error_of(back) == (
        400,
        "invalid_request",
        "unknown, expired or already used state; start the sign-in again",
    )
    finished = await come_back(rig, state=state, code="upstream-code", iss=IDP_ISSUER)
    assert "code" in redirected(finished)[1]
    assert len(rig.provider.tokens) == 1  # the other route never exchanged the code


async def test_a_code_of_one_route_cannot_be_redeemed_at_another(documents_rig: Rig):
    rig = documents_rig
    client_id = rig.provider.document_client  # the same client at every route
    for other in (rig.beside(*OTHERS[name]) for name in sorted(OTHERS)):
        code = await client_code(rig, client_id)
        assert error_of(await redeem(other, client_id, code)) == (
            400,
            "invalid_grant",
            "unknown, expired or already used authorization code",
        )
        assert (await redeem(rig, client_id, code)).status == 200  # not used up


async def test_tokens_of_one_route_are_unknown_at_another(documents_rig: Rig):
    rig = documents_rig
    client_id = rig.provider.document_client
    tokens = (await redeem(rig, client_id, await client_code(rig, client_id))).json()
    exchanged = len(rig.provider.tokens)
    for other in (rig.beside(*OTHERS[name]) for name in sorted(OTHERS)):
        status, error, _ = error_of(await refresh(other, client_id, tokens["refresh_token"]))
        assert (status, error) == (400, "invalid_grant")
        for token in (tokens["refresh_token"], tokens["access_token"]):
            assert (await revoke(other, client_id, token)).status == 200  # RFC 7009: unknown
    assert len(rig.provider.tokens) == exchanged  # no refresh reached the provider
    assert rig.provider.revocations == []  # nor any revocation
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200


async def test_consent_given_at_one_route_is_asked_again_at_another(documents_rig: Rig):
    rig = documents_rig
    client_id = rig.provider.document_client
    web = {"redirect_uri": WEB_REDIRECT}
    request, browser = await consent_page(rig, client_id, **web)
    name = consent_cookie(rig)
    value = cookie_value(await answer(rig, request, browser), name)
    assert (await authorize(rig, client_id, cookie=f"{name}={value}", **web)).status == 302
    for other in (rig.beside(*OTHERS[name]) for name in sorted(OTHERS)):
        # The browser sends both routes its cookies (one host); the other route's own cookie
        # name with this route's value is no better.
        for cookie in (f"{name}={value}", f"{consent_cookie(other)}={value}"):
            page = await authorize(other, client_id, cookie=cookie, **web)
            assert page.status == 200, page.headers
