"""Real Keycloak binding tokens to a client's key (RFC 9449), and the gateway holding them to
it: a public client whose "Require DPoP bound tokens" switch is on gets, for a proof sent with
its token request, an access token marked `typ: DPoP` with `cnf.jkt` (and Keycloak's own
`cnf.kc-jkt-type`); the gateway (provider
kind Keycloak, `dpop: Required`) serves it only with a proof by that key, refuses it as
`Bearer`, and refuses the token copied elsewhere (a proof by another key)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc.jwk import ECKey

from dpop_rs_support import call, config, proof_for, thumbprint
from keycloak_support import USER_PASSWORD, RealKeycloak
from support import (
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    unsigned,
    unverified_claims,
    wait_for_keyset,
    wait_for_port,
)

REALM = "dpop"
CLIENT = "dpop-public"
# The provider's fields beside its issuer, keys and `dpop: Required` (nonces required too).
PROVIDER = "kind: Keycloak\n          dpopProofs: {proofs}"


@pytest.fixture(scope="module")
def keycloak(real_keycloak: RealKeycloak) -> RealKeycloak:
    """A realm with alice and a public client that must bind its tokens (password grant)."""
    if REALM not in real_keycloak.realms:
        real_keycloak.new_realm(REALM)
        real_keycloak.add_user("alice", REALM)
        client = {
            "clientId": CLIENT,
            "publicClient": True,
            "standardFlowEnabled": False,
            "directAccessGrantsEnabled": True,
            "attributes": {"dpop.bound.access.tokens": "true"},
        }
        created = real_keycloak.admin("POST", "/clients", REALM, json=client)
        assert created.status_code == 201, created.text
    return real_keycloak


@pytest.fixture(scope="module")
def gateway(
    keycloak: RealKeycloak, backend: str, logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A gateway whose provider is the realm, kind Keycloak, DPoP required; its MCP URL."""
    port = free_port()
    public = f"http://127.0.0.1:{port}/mcp"
    folder = tmp_path_factory.mktemp("dpop-keycloak")
    idp_port = int(keycloak.url.rsplit(":", 1)[1])
    (folder / "gateway.yaml").write_text(config(port, idp_port, backend, public, REALM, PROVIDER))
    process = Process("gateway-dpop-keycloak", gateway_cmd(folder), logs)
    try:
        wait_for_port(port, process)
        # A token the keys might accept waits for them (503) until they are fetched.
        plausible = unsigned({"alg": "RS256", "kid": "k"}, claims_for(keycloak.issuer(REALM), "x"))
        wait_for_keyset(f"http://127.0.0.1:{port}", plausible)
        yield public
    finally:
        process.stop()


def bound_token(keycloak: RealKeycloak, key: ECKey) -> dict[str, Any]:
    """Alice's token response, for a proof by `key` sent with the token request."""
    endpoint = keycloak.token_endpoint(REALM)
    answer = httpx.post(
        endpoint,
        data={
            "grant_type": "password",
            "client_id": CLIENT,
            "username": "alice",
            "password": USER_PASSWORD,
            "scope": "openid",
        },
        headers={"DPoP": proof_for(key, None, endpoint)},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_keycloak_binds_the_token_and_the_gateway_holds_it_to_the_key(keycloak, gateway):
    key = ECKey.generate_key("P-256")
    tokens = bound_token(keycloak, key)
    token = tokens["access_token"]
    claims = unverified_claims(token)
    assert tokens["token_type"] == "DPoP"
    # Keycloak's marks of a bound access token: its own cnf member beside jkt, typ DPoP.
    assert claims["cnf"] == {"jkt": thumbprint(key), "kc-jkt-type": "DPoP"}
    assert claims["typ"] == "DPoP"
    host = gateway.split("/")[2]
    first = call(gateway, token, proof_for(key, token, gateway), host)
    assert first.json()["error"] == "use_dpop_nonce", first.text
    nonce = first.headers["dpop-nonce"]
    ok = call(gateway, token, proof_for(key, token, gateway, nonce=nonce), host)
    assert ok.status_code == 200, ok.text
    bearer = call(gateway, token, None, host, scheme="Bearer")
    assert (bearer.status_code, bearer.json()["error"]) == (401, "invalid_token")
    assert "DPoP-bound" in bearer.json()["error_description"]
    thief = ECKey.generate_key("P-256")
    stolen = call(gateway, token, proof_for(thief, token, gateway, nonce=nonce), host)
    assert (stolen.status_code, stolen.json()["error"]) == (401, "invalid_token")
    assert "another key" in stolen.json()["error_description"]


def test_without_a_proof_keycloak_refuses_a_client_that_must_bind(keycloak):
    # The switch is what makes `dpop: Required` hold for every user of the client.
    answer = httpx.post(
        keycloak.token_endpoint(REALM),
        data={
            "grant_type": "password",
            "client_id": CLIENT,
            "username": "alice",
            "password": USER_PASSWORD,
        },
        timeout=30,
    )
    assert answer.status_code == 400, answer.text
