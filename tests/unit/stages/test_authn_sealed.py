"""The Broker's DPoP-bound tokens at the JWT stage of its route (`dataplane/authn.py` with
`sealed`): the provider's token inside is verified as any, and the call is held to the sealed
key exactly as a provider's bound token is held to its `cnf.jkt`: `Authorization: DPoP` with a
proof by that key whose `ath` is the hash of the token presented. A sealed token of another
route or deployment, changed, or holding a token the route refuses, is 401 invalid_token; the
backend gets the provider's token inside (with forwardToken), never the seal nor the proof."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.asgi import (
    AUDIT_KEY,
    CLAIMS_KEY,
    PROVIDER_TOKEN_KEY,
    TOKEN_KEY,
    Scope,
)
from mcp_oauth_gateway.audit import AuditRecord
from mcp_oauth_gateway.dpop import BoundToken, TokenSeal
from mcp_oauth_gateway.dpop.bound_tokens import route_aead, seal
from unit.dpop.dpop_support import OTHER_EC

from .dpop_requests import JKT, dpop, plain_token, proof, provider, stage
from .harness import Inner, drive

SECRET = b"s" * 32
ROUTE = "0123456789abcdef0123456789abcdef"


class AtRoute:
    """The Broker's seal at this route (what `broker.bound_tokens.RouteTokens` gives)."""

    def __init__(self, secret: bytes = SECRET):
        async def read() -> bytes:
            return secret

        self.seal = TokenSeal(read)

    async def open(self, scope: Scope, token: str) -> BoundToken:
        return await self.seal.open(ROUTE, token)


def sealed(
    inner: str, jkt: str = JKT, idp: int = 0, route: str = ROUTE, secret: bytes = SECRET
) -> str:
    """`inner` sealed as the Broker seals a provider's token for a client's key."""
    return seal(route_aead(secret, route), route, BoundToken(inner, jkt, idp))


INNER = plain_token()
SEALED = sealed(INNER)


def refused(response, code: str, words: str) -> None:
    assert response.status == 401, response.body
    assert response.json()["error"] == code, response.json()
    assert words in response.json()["error_description"], response.json()


async def test_a_sealed_token_with_its_proof_reaches_the_backend_as_the_providers_token():
    inner = Inner()
    record = AuditRecord()
    response = await drive(
        stage(inner, forward_token=True, sealed=AtRoute()),
        "POST",
        headers=dpop(SEALED, proof(SEALED)),
        scope={AUDIT_KEY: record},
        inner=inner,
    )
    assert response.status == 200, response.body
    seen = inner.last
    # The backend is given the provider's token as a Bearer token: no seal, no proof.
    assert seen.headers == [(b"host", b"gw.test"), (b"authorization", f"Bearer {INNER}".encode())]
    # The claims say the call is bound (CEL's jwt.cnf); memos are keyed by the token presented.
    assert seen.scope[CLAIMS_KEY]["cnf"] == {"jkt": JKT}
    assert seen.scope[CLAIMS_KEY]["sub"] == "alice"
    assert seen.scope[TOKEN_KEY] == SEALED
    assert seen.scope[PROVIDER_TOKEN_KEY] == INNER
    assert record.dpop_jkt == JKT


async def test_a_sealed_token_as_bearer_is_refused():
    response = await drive(
        stage(Inner(), sealed=AtRoute()),
        "POST",
        headers=[(b"authorization", f"Bearer {SEALED}".encode())],
    )
    refused(response, "invalid_token", "DPoP-bound (cnf.jkt)")


async def test_a_stolen_sealed_token_with_a_proof_by_another_key_is_refused():
    response = await drive(
        stage(Inner(), sealed=AtRoute()), "POST", headers=dpop(SEALED, proof(SEALED, key=OTHER_EC))
    )
    refused(response, "invalid_token", "bound to another key")


async def test_the_proof_must_hash_the_sealed_token_not_the_one_inside():
    response = await drive(
        stage(Inner(), sealed=AtRoute()), "POST", headers=dpop(SEALED, proof(INNER))
    )
    refused(response, "invalid_dpop_proof", "ath is not the hash of the access token")


async def test_every_call_needs_its_own_proof_though_the_opened_token_is_remembered():
    authn = stage(Inner(), sealed=AtRoute())
    once = proof(SEALED)
    assert (await drive(authn, "POST", headers=dpop(SEALED, once))).status == 200
    refused(await drive(authn, "POST", headers=dpop(SEALED, once)), "invalid_dpop_proof", "used")
    refused(await drive(authn, "POST", headers=dpop(SEALED)), "invalid_dpop_proof", "no DPoP")
    assert (await drive(authn, "POST", headers=dpop(SEALED, proof(SEALED)))).status == 200


@pytest.mark.parametrize(
    "token",
    [
        sealed(INNER, route="fedcba9876543210fedcba9876543210"),
        sealed(INNER, secret=b"t" * 32),
        SEALED[:-4] + ("AAAA" if not SEALED.endswith("AAAA") else "BBBB"),
    ],
    ids=["another route's", "another deployment's", "changed"],
)
async def test_a_sealed_token_that_does_not_open_here_is_invalid_token(token):
    response = await drive(
        stage(Inner(), sealed=AtRoute()), "POST", headers=dpop(token, proof(token))
    )
    refused(response, "invalid_token", "not issued by this MCP server")


@pytest.mark.parametrize(
    ("token", "words"),
    [
        (sealed(plain_token(exp=1_000)), "token has expired"),
        (sealed(plain_token(aud="another-client")), "aud"),
        (sealed(INNER, idp=1), "another provider"),
        (sealed(plain_token(cnf={"jkt": JKT})), "bound to a key of its own"),
    ],
    ids=["expired inside", "another audience inside", "another provider", "bound inside"],
)
async def test_what_a_sealed_token_holds_is_checked_as_any_token(token, words):
    response = await drive(
        stage(Inner(), sealed=AtRoute()), "POST", headers=dpop(token, proof(token))
    )
    refused(response, "invalid_token", words)


async def test_a_required_route_takes_sealed_tokens_and_refuses_the_provider_token_alone():
    authn = stage(Inner(), provider("Required"), sealed=AtRoute())
    assert (await drive(authn, "POST", headers=dpop(SEALED, proof(SEALED)))).status == 200
    # The provider's token (which only the backend, with forwardToken, ever sees) is unbound.
    refused(
        await drive(authn, "POST", headers=[(b"authorization", f"Bearer {INNER}".encode())]),
        "invalid_token",
        "DPoP-bound tokens only",
    )


async def test_a_route_without_a_broker_reads_no_sealed_token():
    response = await drive(stage(Inner()), "POST", headers=dpop(SEALED, proof(SEALED)))
    refused(response, "invalid_token", "malformed token")
