"""Proofs made by the TypeScript SDK client (`DpopSession` of @modelcontextprotocol/client, run
by node: tests/node/ts_dpop_proofs.mjs) pass the gateway's checks for every algorithm it
signs with, with the thumbprint it computes itself; its proofs are refused once used, for
another request, or with another key's token binding."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from mcp_oauth_gateway.dpop import (
    DpopError,
    DpopNonces,
    MemoryReplayCache,
    ProofRules,
    check_replay,
    htu_of,
    verify_proof,
)
from support import NODE_DIR, node

ALGS = ("ES256", "ES384", "ES512", "PS256", "RS256", "EdDSA")
TOKEN = "an-access-token.from-the-broker"
NONCES = DpopNonces(b"n" * 32)


def ts_sessions(htm: str, htu: str, nonce: str = "") -> list[dict]:
    """Each algorithm's session: its thumbprint and two proofs for the same request."""
    done = subprocess.run(
        [node(), str(NODE_DIR / "ts_dpop_proofs.mjs"), htm, htu, TOKEN, nonce, *ALGS],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=NODE_DIR,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sessions() -> list[dict]:
    # The client strips the query itself; the host and the default port are the gateway's
    # business to normalize.
    return ts_sessions("post", "HTTPS://GW.Example:443/mcp?session=1")


def test_every_algorithm_the_client_signs_with_is_verified_with_its_thumbprint(sessions):
    assert [session["alg"] for session in sessions] == list(ALGS)
    url = htu_of("https", "gw.example", "/mcp")
    for session in sessions:
        for value in session["proofs"]:
            proof = verify_proof(
                [value], "POST", url, time.time(), ProofRules(), TOKEN, session["thumbprint"]
            )
            assert (proof.alg, proof.jkt) == (session["alg"], session["thumbprint"])


async def test_each_proof_is_accepted_once(sessions):
    cache, url = MemoryReplayCache(), htu_of("https", "gw.example", "/mcp")
    now = time.time()
    first, second = sessions[0]["proofs"]
    proofs = [verify_proof([v], "POST", url, now, ProofRules(), TOKEN) for v in (first, second)]
    assert proofs[0].jti != proofs[1].jti
    for proof in proofs:
        await check_replay(cache, proof, now, 300)
    with pytest.raises(DpopError, match="was used already"):
        await check_replay(cache, proofs[0], now, 300)


def test_its_proofs_are_refused_for_another_request_token_or_key(sessions):
    value, now, rules = sessions[0]["proofs"][0], time.time(), ProofRules()
    url = htu_of("https", "gw.example", "/mcp")
    for method, htu, token, jkt, code in [
        ("GET", url, TOKEN, None, "invalid_dpop_proof"),
        ("POST", htu_of("https", "gw.example", "/other"), TOKEN, None, "invalid_dpop_proof"),
        ("POST", url, "another-token", None, "invalid_dpop_proof"),
        ("POST", url, TOKEN, sessions[1]["thumbprint"], "invalid_token"),
    ]:
        with pytest.raises(DpopError) as caught:
            verify_proof([value], method, htu, now, rules, token, jkt)
        assert caught.value.error == code


def test_the_client_answers_a_nonce_challenge_with_a_proof_we_accept():
    url = htu_of("https", "gw.example", "/mcp")
    rules = ProofRules(nonces=NONCES)
    without = ts_sessions("POST", url)[0]["proofs"][0]
    with pytest.raises(DpopError) as caught:
        verify_proof([without], "POST", url, time.time(), rules, TOKEN)
    nonce = caught.value.nonce
    assert caught.value.error == "use_dpop_nonce"
    assert nonce
    assert NONCES.check(nonce, time.time())
    value = ts_sessions("POST", url, nonce)[0]["proofs"][0]
    assert verify_proof([value], "POST", url, time.time(), rules, TOKEN).nonce == nonce
