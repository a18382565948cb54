"""DPoP at the Broker's token endpoint (`broker/grant_proofs.py`, `broker/bound_tokens.py`):
a code or refresh token redeemed with a proof gets an access token sealed to the proof's key
(`token_type: DPoP`) and a refresh token bound to it; every bad proof is 400 naming the check
and costs the client nothing (the code or refresh token stands); `Disabled` ignores proofs,
`Required` asks for one, nonces are asked for with `use_dpop_nonce`; a bound refresh token
needs a proof by its key; the audit line names the key."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.audit import AuditRecord
from mcp_oauth_gateway.broker.grant_proofs import BOUND_REFRESH, REQUIRED
from mcp_oauth_gateway.controlplane.snapshot import CompiledDpop
from mcp_oauth_gateway.dpop import SEALED_PREFIX, BoundToken
from unit.dpop.dpop_support import KEYS, header, public_jwk, rfc7638

from .broker_support import (
    Rig,
    client_code,
    error_of,
    redeem,
    refresh,
    register,
    signed_in,
    started_rig,
)
from .dpop_grants import CLIENT_KEY, JKT, THIEF_KEY, opened, refresh_key, token_proof


def dpop_error(response, error: str, words: str) -> None:
    """400 `error`, its description saying `words`."""
    status, code, description = error_of(response)
    assert (status, code) == (400, error), description
    assert words in description, description


async def test_a_code_redeemed_with_a_proof_gets_tokens_bound_to_its_key(rig: Rig):
    client_id = await register(rig)
    response = await redeem(
        rig, client_id, await client_code(rig, client_id), proofs=[token_proof()]
    )
    assert response.status == 200, response.body
    answer = response.json()
    assert answer["token_type"] == "DPoP"
    assert answer["expires_in"] == 300
    # The client never sees the provider's token: it is sealed with the key and provider.
    sealed = answer["access_token"]
    assert sealed.startswith(SEALED_PREFIX)
    assert "provider-at-1" not in sealed
    assert await opened(rig, sealed) == BoundToken("provider-at-1", JKT, 0)
    assert await refresh_key(rig, answer["refresh_token"]) == JKT
    assert response.header(b"dpop-nonce") is None  # no nonces asked for


async def test_without_a_proof_the_tokens_are_bearer_tokens_and_unbound(rig: Rig):
    _client_id, tokens = await signed_in(rig)
    assert (tokens["token_type"], tokens["access_token"]) == ("Bearer", "provider-at-1")
    assert await refresh_key(rig, tokens["refresh_token"]) is None


@pytest.mark.parametrize(
    ("proofs", "words"),
    # Made when the test runs, not when the module is collected: proofs are short-lived.
    [
        (lambda: [token_proof(htu="http://gw.test/mcp")], "is for 'http://gw.test/mcp'"),
        (lambda: [token_proof(htm="GET")], "is for method 'GET'; this request is POST"),
        (lambda: [token_proof(iat=1_000_000_000)], "s ago (at most 300 s accepted)"),
        (lambda: [token_proof(head=header("ES256", CLIENT_KEY, typ="JWT"))], "typ is 'JWT'"),
        (lambda: [token_proof(), token_proof()], "more than one DPoP header"),
        (lambda: [b"not a proof"], "is not a JWT"),
    ],
    ids=["another URL", "another method", "too old", "not dpop+jwt", "two proofs", "garbage"],
)
async def test_a_bad_proof_is_400_naming_the_check_and_the_code_still_stands(
    rig: Rig, proofs, words
):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    dpop_error(await redeem(rig, client_id, code, proofs=proofs()), "invalid_dpop_proof", words)
    again = await redeem(rig, client_id, code, proofs=[token_proof()])
    assert again.status == 200, again.body
    assert again.json()["token_type"] == "DPoP"


async def test_a_proof_is_accepted_once(rig: Rig):
    client_id = await register(rig)
    once = token_proof()
    first = await redeem(rig, client_id, await client_code(rig, client_id), proofs=[once])
    assert first.status == 200, first.body
    code = await client_code(rig, client_id)
    dpop_error(await redeem(rig, client_id, code, proofs=[once]), "invalid_dpop_proof", "used")
    assert (await redeem(rig, client_id, code, proofs=[token_proof()])).status == 200


async def test_a_disabled_provider_reads_no_proof_and_issues_bearer_tokens():
    async with started_rig(dpop=[CompiledDpop("Disabled")]) as rig:
        client_id = await register(rig)
        code = await client_code(rig, client_id)
        response = await redeem(rig, client_id, code, proofs=[b"not even a proof"])
        assert response.status == 200, response.body
        assert (response.json()["token_type"], response.json()["access_token"]) == (
            "Bearer",
            "provider-at-1",
        )
        assert await refresh_key(rig, response.json()["refresh_token"]) is None


async def test_a_required_provider_refuses_a_redemption_without_a_proof():
    async with started_rig(dpop=[CompiledDpop("Required")]) as rig:
        client_id = await register(rig)
        code = await client_code(rig, client_id)
        response = await redeem(rig, client_id, code)
        assert error_of(response) == (400, "invalid_dpop_proof", REQUIRED)
        assert (await redeem(rig, client_id, code, proofs=[token_proof()])).status == 200


async def test_a_nonce_is_asked_for_and_the_code_waits_for_the_retry():
    async with started_rig(dpop=[CompiledDpop(require_nonce=True)]) as rig:
        client_id = await register(rig)
        code = await client_code(rig, client_id)
        asked = await redeem(rig, client_id, code, proofs=[token_proof()])
        dpop_error(asked, "use_dpop_nonce", "requires a nonce")
        nonce = asked.header(b"dpop-nonce")
        assert nonce is not None
        made_up = token_proof(nonce="A" * 32)
        dpop_error(await redeem(rig, client_id, code, proofs=[made_up]), "use_dpop_nonce", "stale")
        response = await redeem(rig, client_id, code, proofs=[token_proof(nonce=nonce.decode())])
        assert response.status == 200, response.body
        assert response.json()["token_type"] == "DPoP"


async def test_a_bound_refresh_token_needs_a_proof_by_its_key_and_stays_its_holders(rig: Rig):
    client_id = await register(rig)
    code = await client_code(rig, client_id)
    tokens = (await redeem(rig, client_id, code, proofs=[token_proof()])).json()
    held = tokens["refresh_token"]
    # Stolen: without a proof, or with the thief's, refused; the provider is never asked.
    assert error_of(await refresh(rig, client_id, held)) == (400, "invalid_grant", BOUND_REFRESH)
    thief = await refresh(rig, client_id, held, proofs=[token_proof(THIEF_KEY)])
    assert error_of(thief) == (400, "invalid_grant", BOUND_REFRESH)
    assert len(rig.provider.tokens) == 1  # the code exchange only
    # The holder still refreshes with it, and gets tokens bound to the same key.
    response = await refresh(rig, client_id, held, proofs=[token_proof()])
    assert response.status == 200, response.body
    answer = response.json()
    assert answer["token_type"] == "DPoP"
    assert await opened(rig, answer["access_token"]) == BoundToken("provider-at-2", JKT, 0)
    assert await refresh_key(rig, answer["refresh_token"]) == JKT


async def test_a_refresh_with_a_proof_binds_an_unbound_refresh_tokens_successors(rig: Rig):
    client_id, tokens = await signed_in(rig)
    response = await refresh(rig, client_id, tokens["refresh_token"], proofs=[token_proof()])
    assert response.status == 200, response.body
    answer = response.json()
    assert answer["token_type"] == "DPoP"
    assert (await opened(rig, answer["access_token"])).jkt == JKT
    assert await refresh_key(rig, answer["refresh_token"]) == JKT
    bare = await refresh(rig, client_id, answer["refresh_token"])
    assert error_of(bare) == (400, "invalid_grant", BOUND_REFRESH)


async def test_the_audit_lines_name_the_key_of_bound_tokens(rig: Rig):
    client_id = await register(rig)
    issued = AuditRecord()
    code = await client_code(rig, client_id)
    tokens = (await redeem(rig, client_id, code, proofs=[token_proof()], audited=issued)).json()
    assert (issued.event, issued.dpop_jkt) == ("token-issued", JKT)
    assert issued.reason is not None
    assert "DPoP-bound" in issued.reason
    refreshed = AuditRecord()
    await refresh(
        rig, client_id, tokens["refresh_token"], audited=refreshed, proofs=[token_proof()]
    )
    assert (refreshed.event, refreshed.dpop_jkt) == ("token-refreshed", JKT)
    bearer = AuditRecord()
    await redeem(rig, client_id, await client_code(rig, client_id), audited=bearer)
    assert (bearer.event, bearer.dpop_jkt) == ("token-issued", None)


async def test_proofs_of_any_key_type_bind_to_its_thumbprint(rig: Rig):
    # The proof's key is the client's to choose among the provider's algorithms.
    client_id = await register(rig)
    for alg in ("EdDSA", "PS256", "ES384"):
        key = KEYS[alg]
        code = await client_code(rig, client_id)
        response = await redeem(rig, client_id, code, proofs=[token_proof(key, alg=alg)])
        assert response.status == 200, response.body
        sealed = response.json()["access_token"]
        assert (await opened(rig, sealed)).jkt == rfc7638(public_jwk(key))
