"""The Broker's revocation endpoint (`broker/revoke_endpoint.py`, RFC 7009): a client revokes
the tokens it holds, at the gateway and then at the provider; an unknown token is answered 200
without a call to the provider; another client's token is refused and stays valid."""

from __future__ import annotations

import pytest

from .broker_support import REVOKE, Rig, error_of, refresh, register, revoke, signed_in


async def test_revoking_a_refresh_token_revokes_the_providers_at_the_provider(rig: Rig):
    client_id, tokens = await signed_in(rig)
    response = await revoke(rig, client_id, tokens["refresh_token"])
    assert response.status == 200
    assert response.json() == {}
    assert response.header(b"pragma") == b"no-cache"
    assert response.header(b"cache-control") == b"no-store"
    assert rig.provider.revocations == [
        {"token": "provider-rt-1", "token_type_hint": "refresh_token", "client_id": "gateway-at-0"}
    ]
    assert error_of(await refresh(rig, client_id, tokens["refresh_token"])) == (
        400,
        "invalid_grant",
        "unknown, expired or revoked refresh token (a refresh token is used at the token "
        "endpoint of the MCP server that issued it); sign in again",
    )


async def test_revoking_an_access_token_passes_it_to_the_provider(rig: Rig):
    client_id, tokens = await signed_in(rig)
    response = await revoke(rig, client_id, tokens["access_token"], token_type_hint="access_token")
    assert response.status == 200
    assert rig.provider.revocations == [
        {"token": "provider-at-1", "token_type_hint": "access_token", "client_id": "gateway-at-0"}
    ]


async def test_an_unknown_token_is_answered_200_and_not_passed_on(rig: Rig):
    client_id = await register(rig)
    response = await revoke(rig, client_id, "never-issued")
    assert (response.status, response.json()) == (200, {})
    assert rig.provider.revocations == []


async def test_another_clients_token_is_refused_and_stays_valid(rig: Rig):
    client_id, tokens = await signed_in(rig)
    thief = await register(rig)
    assert error_of(await revoke(rig, thief, tokens["refresh_token"])) == (
        400,
        "invalid_request",
        "the token was issued to another client",
    )
    assert rig.provider.revocations == []
    assert (await refresh(rig, client_id, tokens["refresh_token"])).status == 200


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        (
            {"token": "t"},
            (
                400,
                "invalid_client",
                "client_id is required: a token can only be revoked by the client it was issued to",
            ),
        ),
        ({"client_id": "REGISTERED"}, (400, "invalid_request", "token is required")),
        (
            {"client_id": "REGISTERED", "token": "t", "token_type_hint": "id_token"},
            (
                400,
                "unsupported_token_type",
                "token_type_hint 'id_token' is not one of access_token, refresh_token",
            ),
        ),
    ],
)
async def test_incomplete_requests_are_refused(rig: Rig, form, expected):
    client_id = await register(rig)
    form = {k: client_id if v == "REGISTERED" else v for k, v in form.items()}
    assert error_of(await rig.post_form(REVOKE, form)) == expected


async def test_an_unknown_client_is_refused(rig: Rig):
    response = await revoke(rig, "not-registered", "t")
    assert error_of(response)[:2] == (400, "invalid_client")


async def test_the_providers_refusal_is_passed_on(rig: Rig):
    client_id, tokens = await signed_in(rig)
    rig.provider.revocation_answers.append(
        (400, {"error": "invalid_request", "error_description": "Token not active"})
    )
    response = await revoke(rig, client_id, tokens["access_token"])
    assert error_of(response) == (
        400,
        "invalid_request",
        "the identity provider refused the revocation: Token not active",
    )


async def test_an_access_token_cannot_be_revoked_at_a_provider_without_the_endpoint(rig: Rig):
    client_id, tokens = await signed_in(rig)
    document = rig.discoveries[0].document
    assert document is not None
    del document["revocation_endpoint"]
    refused = await revoke(rig, client_id, tokens["access_token"])
    assert error_of(refused)[:2] == (400, "unsupported_token_type")
    # A refresh token is the gateway's own: revoked here, nothing is left to do there.
    assert (await revoke(rig, client_id, tokens["refresh_token"])).status == 200


async def test_other_methods_are_405_naming_post(rig: Rig):
    response = await rig.call("GET", REVOKE)
    assert error_of(response) == (405, "invalid_request", "use POST")
    assert response.header(b"allow") == b"POST"
