"""DPoP at the resource server with real parts (issue 38): npm oidc-provider issuing DPoP-bound
JWT access tokens, two gateway replicas behind a TCP load balancer sharing a real Redis, a real
MCP backend, and the TypeScript SDK client 2.x with its DPoP support signing in and calling
tools. Then what an attacker does with what it can get: the token copied to another machine
(no key), sent as Bearer, proofs replayed, made for another URL or method, signed with HS256,
carrying the private key, made with a wrong clock, a nonce made up or used twice, and the same
proof sent to the other replica.

The client's key pair is made extractable, so that the test can also play the key holder (the
legitimate client) making each kind of bad proof; an attacker gets the token only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from joserfc.jwk import ECKey, OctKey, RSAKey

from dpop_rs_support import (
    ACCEPT,
    ALGORITHMS,
    Stack,
    call,
    dpop_stack,
    holder_key,
    proof_for,
    run_dpop_client,
    thumbprint,
)
from support import claims_for, mint, unverified_claims


@pytest.fixture(scope="module")
def stack(
    logs: Path,
    tmp_path_factory: pytest.TempPathFactory,
    idp_key: tuple[RSAKey, Path],
    redis_url: str,
) -> Iterator[Stack]:
    with dpop_stack(logs, tmp_path_factory.mktemp("dpop"), idp_key, redis_url) as made:
        yield made


@pytest.fixture(scope="module")
def signed_in(stack: Stack) -> dict[str, Any]:
    """The TypeScript client's report: it signed in with DPoP through the load balancer."""
    report = run_dpop_client(stack.public)
    assert report["ok"], report
    return report


def nonce_from(stack: Stack, replica: int, token: str, key: ECKey) -> str:
    """The nonce a replica asks for (a proof without one is answered with it)."""
    answer = call(stack.at(replica), token, proof_for(key, token, stack.public), stack.host)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == "use_dpop_nonce", answer.json()
    return answer.headers["dpop-nonce"]


def refused(answer: httpx.Response, code: str, words: str) -> None:
    """401 with `code`, the description naming `words`, the error on the challenge of the
    scheme used."""
    assert answer.status_code == 401, answer.text
    body = answer.json()
    assert (body["error"], words in body["error_description"]) == (code, True), body
    challenges = answer.headers.get_list("www-authenticate")
    assert challenges[0].startswith("Bearer"), challenges
    assert challenges[1].startswith("DPoP"), challenges


def test_the_typescript_client_signs_in_with_dpop_and_calls_tools(stack, signed_in):
    token = signed_in["accessToken"]
    # The provider bound the token to the client's key, and said so.
    assert signed_in["tokenType"] == "DPoP"
    assert unverified_claims(token)["cnf"] == {"jkt": signed_in["thumbprint"]}
    assert signed_in["tools"] == ["add", "count"]
    assert signed_in["add"] == "5"
    assert (signed_in["count"], signed_in["progress"]) == ("counted to 2", [1, 2])
    # Every call with the token was DPoP with a proof; the first was asked for a nonce, and
    # the retry with it passed.
    with_token = [r for r in signed_in["requests"] if r["scheme"]]
    assert with_token, signed_in["requests"]
    assert all(r["scheme"] == "DPoP" and r["proof"] for r in with_token), with_token
    first, retry = with_token[0], with_token[1]
    assert (first["status"], first["nonce"]) == (401, None)
    assert (retry["nonce"], retry["status"]) == (first["dpopNonce"], 200)
    # No proof, no token reached the MCP server.
    seen = httpx.get(f"http://{stack.backend}/debug/requests", timeout=10).json()
    assert seen
    names = [(name.lower(), value) for request in seen for name, value in request["headers"]]
    assert not [value for name, value in names if name == "dpop"]
    assert not [value for name, value in names if name == "authorization"]


def test_the_audit_line_names_the_key_of_a_dpop_bound_call(stack, signed_in):
    lines = stack.audit_lines()
    allowed = [line for line in lines if line["decision"] == "allow" and line["caller"]]
    assert allowed, lines[-5:]
    assert {line["caller"].get("dpop_jkt") for line in allowed} == {signed_in["thumbprint"]}


def test_attacks_on_a_bound_token_are_refused(stack, signed_in):
    token = signed_in["accessToken"]
    key = holder_key(signed_in["privateJwk"])
    nonce = nonce_from(stack, 0, token, key)
    url, host = stack.at(0), stack.host

    def send(proof: str | None, method: str = "POST", scheme: str = "DPoP") -> httpx.Response:
        return call(url, token, proof, host, method, scheme)

    # The key holder's proof for this request passes: each attack below changes one thing.
    assert send(proof_for(key, token, stack.public, nonce=nonce)).status_code == 200
    # The token copied to another machine: a proof by another key, or as a bearer token.
    thief = ECKey.generate_key("P-256")
    refused(
        send(proof_for(thief, token, stack.public, nonce=nonce)), "invalid_token", "another key"
    )
    refused(send(None, scheme="Bearer"), "invalid_token", "DPoP-bound (cnf.jkt)")
    refused(send(None), "invalid_dpop_proof", "no DPoP header")
    # A proof replayed: one the client's SDK made and the gateway accepted, or one of ours.
    refused(send(signed_in["usedProof"]), "invalid_dpop_proof", "used already")
    once = proof_for(key, token, stack.public, nonce=nonce)
    assert send(once).status_code == 200
    refused(send(once), "invalid_dpop_proof", "used already")
    # A proof for another method or URL.
    refused(
        send(proof_for(key, token, stack.public, nonce=nonce), method="GET"),
        "invalid_dpop_proof",
        "is for method 'POST'",
    )
    for other in (stack.public + "/other", url, stack.public.replace("http:", "https:")):
        refused(send(proof_for(key, token, other, nonce=nonce)), "invalid_dpop_proof", "is for")
    # Proofs that prove nothing: HMAC, a private key in the header, a clock far off.
    secret = OctKey.generate_key(256)
    hs256 = {"typ": "dpop+jwt", "alg": "HS256", "jwk": dict(secret.as_dict(private=True))}
    refused(
        send(proof_for(secret, token, stack.public, nonce=nonce, head=hs256, alg="HS256")),
        "invalid_dpop_proof",
        "alg 'HS256' is not accepted",
    )
    leaked = {"typ": "dpop+jwt", "alg": "ES256", "jwk": dict(key.as_dict(private=True))}
    refused(
        send(proof_for(key, token, stack.public, nonce=nonce, head=leaked)),
        "invalid_dpop_proof",
        "private key",
    )
    now = int(unverified_claims(once)["iat"])
    for skew, words in ((-400, "s ago"), (400, "in the future")):
        proof = proof_for(key, token, stack.public, nonce=nonce, iat=now + skew)
        refused(send(proof), "invalid_dpop_proof", words)
    # An algorithm the provider does not list (RSA): refused, though the key holder signed it.
    rsa = RSAKey.generate_key(2048)
    rsa_proof = proof_for(rsa, token, stack.public, nonce=nonce, alg="RS256")
    refused(send(rsa_proof), "invalid_dpop_proof", "alg 'RS256' is not accepted")


def test_nonces_are_asked_for_and_a_used_one_replays_nothing(stack, signed_in):
    token = signed_in["accessToken"]
    key = holder_key(signed_in["privateJwk"])
    host = stack.host
    first = call(stack.at(0), token, proof_for(key, token, stack.public), host)
    assert first.json()["error"] == "use_dpop_nonce"
    assert 'DPoP error="use_dpop_nonce"' in first.headers.get_list("www-authenticate")[1]
    nonce = first.headers["dpop-nonce"]
    # Made up, or another server's: asked again, with the real one.
    for other in ("A" * 32, "not-a-nonce"):
        made_up = call(stack.at(0), token, proof_for(key, token, stack.public, nonce=other), host)
        assert made_up.json()["error"] == "use_dpop_nonce"
        assert made_up.headers["dpop-nonce"] not in ("", other)
    # Every replica accepts every replica's nonce (their key is the shared store's secret).
    once = proof_for(key, token, stack.public, nonce=nonce)
    assert call(stack.at(1), token, once, host).status_code == 200
    # A valid nonce does not make a proof reusable, at either replica.
    for replica in (0, 1):
        refused(call(stack.at(replica), token, once, host), "invalid_dpop_proof", "used already")


def test_two_replicas_sharing_redis_accept_a_proof_once(stack, signed_in, redis_url):
    token = signed_in["accessToken"]
    key = holder_key(signed_in["privateJwk"])
    nonce = nonce_from(stack, 1, token, key)
    proof = proof_for(key, token, stack.public, nonce=nonce)
    # As a load balancer sends it: the first copy to replica 0, the second to replica 1.
    assert call(stack.at(0), token, proof, stack.host).status_code == 200
    refused(call(stack.at(1), token, proof, stack.host), "invalid_dpop_proof", "used already")
    # What they share is in Redis, under the gateway's prefix, expiring.
    shared = redis.Redis.from_url(redis_url)
    kept = shared.keys("mcp-oauth-gateway:dpop:jti:*")
    assert kept
    assert all(0 < shared.pttl(name) <= 301_000 for name in kept)


def test_required_refuses_unbound_tokens_and_the_metadata_says_so(stack, idp_key):
    plain = mint(idp_key[0], claims_for(stack.issuer, stack.public))
    refused(
        call(stack.at(0), plain, None, stack.host, scheme="Bearer"), "invalid_token", "Required"
    )
    metadata = httpx.get(
        stack.public.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"), timeout=10
    ).json()
    assert metadata["dpop_signing_alg_values_supported"] == ALGORITHMS
    assert metadata["dpop_bound_access_tokens_required"] is True
    missing = httpx.post(stack.public, headers=ACCEPT, timeout=10)
    assert missing.headers.get_list("www-authenticate")[1].startswith('DPoP algs="ES256 EdDSA"')


def test_browsers_may_send_a_proof_and_read_the_challenge_and_nonce(stack):
    origin = {"origin": "https://app.example"}
    asked = httpx.options(
        stack.public,
        headers={**origin, "access-control-request-method": "POST"},
        timeout=10,
    )
    assert "DPoP" in asked.headers["access-control-allow-headers"].split(", ")
    refused_answer = httpx.post(stack.public, headers={**ACCEPT, **origin}, timeout=10)
    exposed = refused_answer.headers["access-control-expose-headers"].split(", ")
    assert {"WWW-Authenticate", "DPoP-Nonce"} <= set(exposed)


def test_a_token_bound_to_our_own_key_shows_the_binding_is_the_tokens(stack, idp_key):
    # A token the provider bound to a key the test holds: its proofs pass, another key's fail.
    key = ECKey.generate_key("P-256")
    bound = mint(idp_key[0], claims_for(stack.issuer, stack.public, cnf={"jkt": thumbprint(key)}))
    nonce = nonce_from(stack, 0, bound, key)
    for replica in (0, 1):
        ok = call(
            stack.at(replica), bound, proof_for(key, bound, stack.public, nonce=nonce), stack.host
        )
        assert ok.status_code == 200, ok.text
    stranger = ECKey.generate_key("P-256")
    refused(
        call(stack.at(0), bound, proof_for(stranger, bound, stack.public, nonce=nonce), stack.host),
        "invalid_token",
        "another key",
    )
