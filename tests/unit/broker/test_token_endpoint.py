"""The Broker's token endpoint (`broker/token_endpoint.py`): the gateway's one-time code redeemed
once, by its client, with its redirect URI and PKCE verifier, for the provider's tokens with a
gateway refresh token; refresh tokens rotated at each use, a rotated-away one revoking the
sign-in, and the provider's outages never costing the client its token."""

from __future__ import annotations

import time

import pytest

from mcp_oauth_gateway.broker import store as store_module
from mcp_oauth_gateway.broker.state import CODE_TTL

from .broker_support import (
    REDIRECT,
    TOKEN,
    Rig,
    client_code,
    error_of,
    redeem,
    refresh,
    register,
    signed_in,
)

REPLAYED = (400, "invalid_grant", "unknown, expired or already used authorization code")


class Later:
    """The `time` module as the store reads it, `seconds` from now."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def monotonic(self) -> float:
        return time.monotonic() + self.seconds


async def test_a_code_is_redeemed_for_the_providers_tokens_with_a_gateway_refresh_token(rig: Rig):
    client_id = await register(rig)
    response = await redeem(rig, client_id, await client_code(rig, client_id))
    assert response.status == 200
    assert response.header(b"cache-control") == b"no-store"
    assert response.header(b"pragma") == b"no-cache"
    tokens = response.json()
    gateway_refresh = tokens.pop("refresh_token")
    assert tokens == {"access_token": "provider-at-1", "token_type": "Bearer", "expires_in": 300}
    assert gateway_refresh != "provider-rt-1"  # the provider's stays with the gateway


async def test_a_code_is_redeemed_once(rig: Rig):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    assert (await redeem(rig, client_id, code)).status == 200
    assert error_of(await redeem(rig, client_id, code)) == REPLAYED


async def test_an_expired_code_is_refused(rig: Rig, monkeypatch: pytest.MonkeyPatch):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    monkeypatch.setattr(store_module, "time", Later(CODE_TTL + 1))
    assert error_of(await redeem(rig, client_id, code)) == REPLAYED


@pytest.mark.parametrize(
    ("changes", "description"),
    [
        ({"client_id": "another registered client"}, "the code was issued to another client"),
        (
            {"redirect_uri": REDIRECT + "/other"},
            "redirect_uri does not match the authorization request",
        ),
        (
            {"code_verifier": "w" * 64},
            "PKCE verification failed (code_verifier does not match the code_challenge)",
        ),
        (
            {"code_verifier": ""},
            "PKCE verification failed (code_verifier does not match the code_challenge)",
        ),
    ],
)
async def test_a_code_presented_wrongly_is_refused_and_used_up(rig: Rig, changes, description):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    if "client_id" in changes:
        changes = {"client_id": await register(rig)}
    assert error_of(await redeem(rig, client_id, code, **changes)) == (
        400,
        "invalid_grant",
        description,
    )
    assert error_of(await redeem(rig, client_id, code)) == REPLAYED


async def test_a_token_for_another_resource_is_refused(rig: Rig):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    response = await redeem(rig, client_id, code, resource="http://elsewhere.test/mcp")
    assert error_of(response) == (
        400,
        "invalid_target",
        "resource 'http://elsewhere.test/mcp' is not served here; this authorization server "
        "issues tokens for 'http://gw.test/mcp' only",
    )
    assert (await redeem(rig, client_id, code)).status == 200  # checked before the code is used


async def test_other_grant_types_and_methods_are_refused(rig: Rig):
    response = await rig.post_form(TOKEN, {"grant_type": "password"})
    assert error_of(response) == (
        400,
        "unsupported_grant_type",
        "grant_type 'password' is not supported (authorization_code, refresh_token)",
    )
    got = await rig.call("GET", TOKEN)
    assert error_of(got) == (405, "invalid_request", "use POST")
    assert got.header(b"allow") == b"POST"


# --- refresh ---------------------------------------------------------------------------------


async def test_a_refresh_rotates_the_gateway_token_and_passes_a_narrower_scope_on(rig: Rig):
    client_id, tokens = await signed_in(rig)
    response = await refresh(rig, client_id, tokens["refresh_token"], scope="openid")
    assert response.status == 200
    assert response.header(b"pragma") == b"no-cache"
    rotated = response.json()
    assert rotated["access_token"] == "provider-at-2"
    assert rotated["refresh_token"] not in (tokens["refresh_token"], "provider-rt-2")
    assert rig.provider.last_token_form == {
        "client_id": "gateway-at-0",
        "grant_type": "refresh_token",
        "refresh_token": "provider-rt-1",
        "scope": "openid",
    }
    again = await refresh(rig, client_id, rotated["refresh_token"])
    assert again.status == 200
    assert "scope" not in rig.provider.last_token_form


async def test_a_rotated_away_token_coming_back_revokes_the_sign_in(rig: Rig):
    client_id, tokens = await signed_in(rig)
    rotated = (await refresh(rig, client_id, tokens["refresh_token"])).json()
    assert error_of(await refresh(rig, client_id, tokens["refresh_token"])) == (
        400,
        "invalid_grant",
        "this refresh token was already exchanged once; using it again revokes the sign-in "
        "(sign in again)",
    )
    assert error_of(await refresh(rig, client_id, rotated["refresh_token"])) == (
        400,
        "invalid_grant",
        "unknown, expired or revoked refresh token (a refresh token is used at the token "
        "endpoint of the MCP server that issued it); sign in again",
    )
    assert len(rig.provider.tokens) == 2  # the code exchange and the one good refresh


async def test_a_refresh_token_is_only_good_for_its_client(rig: Rig):
    client_id, tokens = await signed_in(rig)
    thief = await register(rig)
    assert error_of(await refresh(rig, thief, tokens["refresh_token"])) == (
        400,
        "invalid_grant",
        "the refresh token was issued to another client",
    )
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"client_id": ""},
            (
                400,
                "invalid_client",
                "client_id is required: a refresh token can only be used by the client it was "
                "issued to",
            ),
        ),
        ({"refresh_token": ""}, (400, "invalid_request", "refresh_token is required")),
        ({"scope": "openid\x00"}, None),
    ],
)
async def test_incomplete_refreshes_are_refused_before_the_token_is_used(
    rig: Rig, changes, expected
):
    client_id, tokens = await signed_in(rig)
    response = await refresh(rig, client_id, tokens["refresh_token"], **changes)
    if expected is None:
        assert error_of(response)[:2] == (400, "invalid_scope")
    else:
        assert error_of(response) == expected
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200


async def test_an_unknown_client_cannot_refresh(rig: Rig):
    _, tokens = await signed_in(rig)
    response = await refresh(rig, "not-registered", tokens["refresh_token"])
    assert error_of(response)[:2] == (400, "invalid_client")


@pytest.mark.parametrize("answer", [(503, {"error": "temporarily_unavailable"}), (200, b"<html>")])
async def test_a_provider_that_does_not_answer_leaves_the_refresh_token_valid(rig: Rig, answer):
    client_id, tokens = await signed_in(rig)
    rig.provider.token_answers.append(answer)
    assert error_of(await refresh(rig, client_id, tokens["refresh_token"])) == (
        502,
        "temporarily_unavailable",
        "the identity provider's token endpoint did not answer; the refresh token is still "
        "valid, try again",
    )
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200


async def test_unavailable_provider_metadata_leaves_the_refresh_token_valid(rig: Rig):
    client_id, tokens = await signed_in(rig)
    document, rig.discoveries[0].document = rig.discoveries[0].document, None
    status, error, _ = error_of(await refresh(rig, client_id, tokens["refresh_token"]))
    assert (status, error) == (502, "temporarily_unavailable")
    rig.discoveries[0].document = document
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200


async def test_an_answer_that_is_no_token_response_is_a_refusal_that_keeps_the_token(rig: Rig):
    client_id, tokens = await signed_in(rig)
    rig.provider.token_answers.append((200, "not an object"))
    assert error_of(await refresh(rig, client_id, tokens["refresh_token"])) == (
        502,
        "invalid_grant",
        "the identity provider refused the refresh",
    )
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200


async def test_the_providers_invalid_grant_is_passed_on_and_ends_the_token(rig: Rig):
    client_id, tokens = await signed_in(rig)
    rig.provider.token_answers.append(
        (400, {"error": "invalid_grant", "error_description": "Session not active"})
    )
    refused = await refresh(rig, client_id, tokens["refresh_token"])
    assert error_of(refused) == (400, "invalid_grant", "Session not active")
    assert error_of(await refresh(rig, client_id, tokens["refresh_token"])) == (
        400,
        "invalid_grant",
        "unknown, expired or revoked refresh token (a refresh token is used at the token "
        "endpoint of the MCP server that issued it); sign in again",
    )


async def test_another_refusal_is_passed_on_and_keeps_the_token(rig: Rig):
    client_id, tokens = await signed_in(rig)
    rig.provider.token_answers.append((400, {"error": "invalid_scope"}))
    refused = await refresh(rig, client_id, tokens["refresh_token"], scope="admin")
    assert error_of(refused) == (400, "invalid_scope", "the identity provider refused the refresh")
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200
