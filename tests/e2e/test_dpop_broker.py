"""DPoP in Broker mode with real parts (issue 38): the TypeScript SDK client 2.x with its DPoP
support registers with the gateway, signs in through it at npm oidc-provider (whose tokens are
bearer tokens: the gateway's own token requests carry no proof), and gets from the gateway an
access token bound to its key (`token_type: DPoP`); it calls tools, and refreshes with a proof
when its token is refused. Two gateway replicas behind a TCP load balancer share a real Redis:
a token issued through one works at the other, and so do the nonces.

Then what a thief does with what it can copy: the access token sent as Bearer or with a proof
by its own key, the refresh token without the key; and a client without DPoP support, which
the route (`dpop: Required`) would refuse, is told so at the token endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc.jwk import ECKey, Key, RSAKey

from broker_flow import BrokerClient
from dpop_broker_support import IDP_ENV, broker_config, token_request, with_nonce
from dpop_rs_support import (
    ALGORITHMS,
    Stack,
    call,
    dpop_stack,
    holder_key,
    proof_for,
    run_dpop_client,
)

SEALED = "mcpgw-dpop."
TOKEN_PATH = "/mcp/oauth/token"


@pytest.fixture(scope="module")
def stack(
    logs: Path,
    tmp_path_factory: pytest.TempPathFactory,
    idp_key: tuple[RSAKey, Path],
    redis_url: str,
) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("dpop-broker")
    with dpop_stack(logs, folder, idp_key, redis_url, broker_config, IDP_ENV) as made:
        yield made


@pytest.fixture(scope="module")
def signed_in(stack: Stack) -> dict[str, Any]:
    """The TypeScript client's report: it registered, signed in with DPoP through the load
    balancer, called tools, and refreshed once."""
    report = run_dpop_client(stack.public, "alice", "-", "ES256", "--refresh")
    assert report["ok"], report
    return report


def nonce_at(stack: Stack, replica: int, token: str, key: Key) -> str:
    """The nonce a replica asks for (a proof without one is answered with it)."""
    answer = call(stack.at(replica), token, proof_for(key, token, stack.public), stack.host)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == "use_dpop_nonce", answer.json()
    return answer.headers["dpop-nonce"]


def refused(answer: httpx.Response, status: int, code: str, words: str) -> None:
    """`status` with `code`, the description saying `words`."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert (body["error"], words in body["error_description"]) == (code, True), body


def test_the_typescript_client_signs_in_through_the_broker_with_dpop(stack, signed_in):
    # The gateway bound the token it handed out, and said so; the provider's token stayed
    # with the gateway.
    assert signed_in["tokenType"] == "DPoP"
    assert signed_in["accessToken"].startswith(SEALED)
    assert signed_in["tools"] == ["add", "count"]
    assert (signed_in["add"], signed_in["count"]) == ("5", "counted to 2")
    # Its token refused, the SDK refreshed with a proof and got a new bound token.
    assert signed_in["afterRefresh"] == "9"
    refreshed = signed_in["refreshed"]
    assert refreshed["token_type"] == "DPoP"
    assert refreshed["access_token"].startswith(SEALED)
    assert refreshed["access_token"] != signed_in["accessToken"]
    requests = signed_in["requests"]
    # Every token request carried a proof: the first was asked for a nonce, and the nonce it
    # got held for the MCP calls too (one server, one origin).
    grants = [(r["grant"], r["status"], r["proof"]) for r in requests if r["path"] == TOKEN_PATH]
    assert grants == [
        ("authorization_code", 400, True),
        ("authorization_code", 200, True),
        ("refresh_token", 200, True),
    ], requests
    calls = [r for r in requests if r["scheme"]]
    assert all(r["scheme"] == "DPoP" and r["proof"] and r["nonce"] for r in calls), calls
    assert [r["status"] for r in calls if r["status"] == 401] == [401]  # the spoiled token's
    # No proof, no token of any kind reached the MCP server.
    seen = httpx.get(f"http://{stack.backend}/debug/requests", timeout=10).json()
    names = [name.lower() for request in seen for name, _ in request["headers"]]
    assert seen
    assert "dpop" not in names
    assert "authorization" not in names


def test_the_metadata_offers_dpop_at_the_token_endpoint(stack):
    base = stack.public.rsplit("/mcp", 1)[0]
    asm = httpx.get(f"{base}/.well-known/oauth-authorization-server/mcp", timeout=10).json()
    assert asm["token_endpoint"] == stack.public + "/oauth/token"
    assert asm["dpop_signing_alg_values_supported"] == ALGORITHMS
    prm = httpx.get(f"{base}/.well-known/oauth-protected-resource/mcp", timeout=10).json()
    assert prm["dpop_bound_access_tokens_required"] is True


def test_the_access_token_copied_without_the_key_is_refused_at_both_replicas(stack, signed_in):
    token = signed_in["refreshed"]["access_token"]
    key = holder_key(signed_in["privateJwk"])
    thief = ECKey.generate_key("P-256")
    for replica in (0, 1):
        url = stack.at(replica)
        nonce = nonce_at(stack, replica, token, key)
        # The key holder is served by either replica (a token issued through one of them).
        own = call(url, token, proof_for(key, token, stack.public, nonce=nonce), stack.host)
        assert own.status_code == 200, own.text
        as_bearer = call(url, token, None, stack.host, scheme="Bearer")
        refused(as_bearer, 401, "invalid_token", "DPoP-bound (cnf.jkt)")
        theirs = proof_for(thief, token, stack.public, nonce=nonce)
        refused(call(url, token, theirs, stack.host), 401, "invalid_token", "another key")
        refused(call(url, token, None, stack.host), 401, "invalid_dpop_proof", "no DPoP header")
        # Changed by one character, it opens nowhere.
        changed = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
        proof = proof_for(key, changed, stack.public, nonce=nonce)
        refused(call(url, changed, proof, stack.host), 401, "invalid_token", "not issued by")


def test_the_refresh_token_copied_without_the_key_is_refused(stack, signed_in):
    form = {
        "grant_type": "refresh_token",
        "refresh_token": signed_in["refreshed"]["refresh_token"],
        "client_id": signed_in["clientId"],
    }
    htu = stack.public + "/oauth/token"
    url = f"http://127.0.0.1:{stack.replicas[1]}{TOKEN_PATH}"
    bound = "the refresh token is bound to a DPoP key; send a proof signed by it"
    refused(token_request(url, form, stack.host), 400, "invalid_grant", bound)
    thief = ECKey.generate_key("P-256")
    refused(with_nonce(url, form, stack.host, htu, thief), 400, "invalid_grant", bound)
    # Still its holder's: refreshed at the other replica with a proof by the key.
    key = holder_key(signed_in["privateJwk"])
    answer = with_nonce(url, form, stack.host, htu, key)
    assert answer.status_code == 200, answer.text
    assert answer.json()["token_type"] == "DPoP"
    token = answer.json()["access_token"]
    nonce = nonce_at(stack, 0, token, key)
    own = call(stack.at(0), token, proof_for(key, token, stack.public, nonce=nonce), stack.host)
    assert own.status_code == 200, own.text


async def test_a_client_without_dpop_is_told_at_the_token_endpoint(stack):
    client = BrokerClient(stack.public).register()
    query = await client.code("alice", "x")
    answer = client.redeem(query["code"])
    refused(answer, 400, "invalid_dpop_proof", "accepts DPoP-bound tokens only")
    # The code still stands: redeemed with a proof, it gets a bound token.
    form = {
        "grant_type": "authorization_code",
        "code": query["code"],
        "client_id": client.client_id,
        "redirect_uri": client.redirect,
        "code_verifier": client.verifier,
    }
    url = f"http://127.0.0.1:{stack.replicas[0]}{TOKEN_PATH}"
    key = ECKey.generate_key("P-256")
    redeemed = with_nonce(url, form, stack.host, stack.public + "/oauth/token", key)
    assert redeemed.status_code == 200, redeemed.text
    assert redeemed.json()["token_type"] == "DPoP"


def test_the_audit_lines_name_the_key_the_tokens_are_bound_to(stack, signed_in):
    lines = stack.audit_lines()
    by_event = {line["event"]: line for line in lines if line["event"]}
    for event in ("token-issued", "token-refreshed"):
        line = by_event[event]
        assert line["decision"] == "allow", line
        assert line["caller"]["dpop_jkt"] == signed_in["thumbprint"], line
        assert "DPoP-bound" in line["reason"], line
    calls = [line for line in lines if line["path"] == "/mcp" and line["decision"] == "allow"]
    assert calls, lines[-5:]
    assert signed_in["thumbprint"] in {line["caller"].get("dpop_jkt") for line in calls}
