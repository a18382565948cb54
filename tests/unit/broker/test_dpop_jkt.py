"""`dpop_jkt` on the Broker's authorization request (RFC 9449 §10): checked at /authorize, kept
with the sign-in and its code, and the code redeemed only with a proof by that key; and the
revocation of a sealed access token (RFC 7009), which revokes the provider's token inside."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.broker.grant_proofs import NAMED_KEY, OTHER_KEY
from mcp_oauth_gateway.controlplane.snapshot import CompiledDpop

from .broker_support import (
    REDIRECT,
    Rig,
    authorize,
    client_code,
    error_of,
    redeem,
    redirected,
    register,
    revoke,
    started_rig,
)
from .dpop_grants import JKT, THIEF_KEY, opened, token_proof


async def test_a_code_for_a_named_key_is_redeemed_with_that_keys_proof_only(rig: Rig):
    client_id = await register(rig)
    code = await client_code(rig, client_id, dpop_jkt=JKT)
    assert error_of(await redeem(rig, client_id, code)) == (400, "invalid_dpop_proof", NAMED_KEY)
    stolen = await redeem(rig, client_id, code, proofs=[token_proof(THIEF_KEY)])
    assert error_of(stolen) == (400, "invalid_dpop_proof", OTHER_KEY)
    # The code was not used up by either: its client redeems it with its key.
    response = await redeem(rig, client_id, code, proofs=[token_proof()])
    assert response.status == 200, response.body
    assert (await opened(rig, response.json()["access_token"])).jkt == JKT


@pytest.mark.parametrize(
    "given",
    ["", "short", JKT + "A", JKT[:-1] + "B", "!" * 43, JKT[:-1] + "="],
    ids=["empty", "short", "44 characters", "not a digest's last", "not base64url", "padded"],
)
async def test_a_dpop_jkt_that_is_no_thumbprint_goes_back_to_the_client(rig: Rig, given: str):
    where, params = redirected(await authorize(rig, await register(rig), dpop_jkt=given))
    assert where == REDIRECT
    assert params["error"] == "invalid_request"
    assert "base64url SHA-256 thumbprint (RFC 7638)" in params["error_description"]
    assert params["state"] == "client-state"


async def test_a_dpop_jkt_is_refused_where_no_provider_binds_tokens():
    async with started_rig(dpop=[CompiledDpop("Disabled")]) as rig:
        _where, params = redirected(await authorize(rig, await register(rig), dpop_jkt=JKT))
    assert params["error"] == "invalid_request"
    assert "dpop: Disabled" in params["error_description"]


async def test_revoking_a_sealed_access_token_revokes_the_providers_token_inside(rig: Rig):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    sealed = (await redeem(rig, client_id, code, proofs=[token_proof()])).json()["access_token"]
    response = await revoke(rig, client_id, sealed, token_type_hint="access_token")
    assert response.status == 200, response.body
    assert rig.provider.revocations == [
        {"token": "provider-at-1", "token_type_hint": "access_token", "client_id": "gateway-at-0"}
    ]


async def test_a_sealed_token_of_another_route_is_unknown_to_the_revocation(rig: Rig):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    sealed = (await redeem(rig, client_id, code, proofs=[token_proof()])).json()["access_token"]
    other = rig.beside("default/other", "/other/mcp")
    theirs = await register(other)
    response = await revoke(other, theirs, sealed, token_type_hint="access_token")
    assert (response.status, response.json()) == (200, {})
    assert rig.provider.revocations == []
    # Another client of the same route cannot revoke it either.
    thief = await register(rig)
    refused = await revoke(rig, thief, sealed, token_type_hint="access_token")
    assert error_of(refused) == (400, "invalid_request", "the token was issued to another client")
