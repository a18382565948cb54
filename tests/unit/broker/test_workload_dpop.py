"""DPoP at the jwt-bearer grant (RFC 9449 §5 covers every grant), through a whole gateway in
process: with a proof, the token the gateway mints for a workload carries `cnf.jkt` and the
answer says `token_type: DPoP`; the route then takes it only with proofs by that key. A bad
proof is refused before the assertion is used up."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from joserfc.jwk import ECKey

from support import unverified_claims
from unit.dpop.dpop_support import public_jwk, rfc7638
from unit.stages.dpop_requests import proof
from unit.stages.harness import drive

from .workload_support import FORM, JWT_BEARER, RESOURCE, TOKEN, call, gateway, sa_claims, sa_token

WORKLOAD_KEY = ECKey.generate_key("P-256")
JKT = rfc7638(public_jwk(WORKLOAD_KEY))
TOKEN_URL = "http://gw.test" + TOKEN


def made_now(token: str | None, htu: str, key: ECKey = WORKLOAD_KEY, **changes: object) -> bytes:
    """A proof for a POST to `htu`, made now (`token`: the access token it is sent with)."""
    changes.setdefault("iat", int(time.time()))
    return proof(token, htu=htu, key=key, **changes)


async def exchange_with(app, assertion: str, *proofs: bytes):
    """A jwt-bearer token request with these `DPoP` headers."""
    body = urlencode({"grant_type": JWT_BEARER, "assertion": assertion}).encode()
    headers = [FORM, *((b"dpop", p) for p in proofs)]
    return await drive(app, "POST", TOKEN, body=body, headers=headers)


async def call_with(app, token: str, scheme: str, *proofs: bytes):
    """An MCP request to the route with `token` as `scheme` and these proofs."""
    headers = [
        (b"authorization", f"{scheme} {token}".encode()),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        *((b"dpop", p) for p in proofs),
    ]
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    return await drive(app, "POST", "/mcp", body=body, headers=headers)


async def test_a_workload_with_a_proof_gets_a_token_bound_to_its_key(tmp_path):
    app, upstream = gateway(tmp_path)
    response = await exchange_with(app, sa_token(sa_claims()), made_now(None, TOKEN_URL))
    assert response.status == 200, response.body
    answer = response.json()
    assert answer["token_type"] == "DPoP"
    token = answer["access_token"]
    assert unverified_claims(token)["cnf"] == {"jkt": JKT}
    # At the route: with a proof by the key, in; as Bearer, or with another key's proof, out.
    reached = await call_with(app, token, "DPoP", made_now(token, RESOURCE))
    assert reached.status == 200, reached.body
    assert len(upstream.sent) == 1
    as_bearer = await call(app, token)
    assert as_bearer.status == 401
    assert "DPoP-bound" in as_bearer.json()["error_description"]
    thief = ECKey.generate_key("P-256")
    stolen = await call_with(app, token, "DPoP", made_now(token, RESOURCE, key=thief))
    assert stolen.status == 401
    assert "another key" in stolen.json()["error_description"]
    assert len(upstream.sent) == 1


async def test_a_bad_proof_is_refused_and_the_assertion_is_not_used_up(tmp_path):
    app, _ = gateway(tmp_path)
    assertion = sa_token(sa_claims())
    wrong = await exchange_with(app, assertion, made_now(None, RESOURCE))
    assert wrong.status == 400, wrong.body
    assert wrong.json()["error"] == "invalid_dpop_proof"
    assert "is for 'http://gw.test/mcp'" in wrong.json()["error_description"]
    once = made_now(None, TOKEN_URL)
    assert (await exchange_with(app, assertion, once)).status == 200
    # The proof is used now: another assertion with it is refused.
    replayed = await exchange_with(app, sa_token(sa_claims(jti="jti-2")), once)
    assert replayed.status == 400
    assert "used already" in replayed.json()["error_description"]


async def test_the_metadata_lists_the_dpop_algorithms_of_the_workloads_tokens(tmp_path):
    app, _ = gateway(tmp_path)
    document = (await drive(app, "GET", "/.well-known/oauth-authorization-server/mcp")).json()
    assert "ES256" in document["dpop_signing_alg_values_supported"]
