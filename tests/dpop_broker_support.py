"""DPoP in Broker mode, end to end: the stack of `dpop_rs_support` (npm oidc-provider in the
Keycloak layout, two gateway replicas behind a TCP load balancer sharing a real Redis, a real
MCP backend) with the gateway as the authorization server its clients see. The provider's own
tokens are bearer tokens (the gateway's token requests to it carry no proof); the gateway binds
what it hands out. Its provider requires DPoP with server nonces, so clients meet nonces at the
token endpoint and at the MCP endpoint alike."""

from __future__ import annotations

import httpx
from joserfc.jwk import Key

from dpop_rs_support import config, proof_for

CLIENT_ID = "mcp-public"  # the gateway's client at the provider (clients register with it)
_MCP = "      mcp:\n        resourceMetadata:"
_BROKER = (
    "      mcp:\n        provider: Keycloak\n        clientId: mcp-public\n"
    "        authorizationServerMode: Broker\n        resourceMetadata:"
)
_PRM_MATCH = (
    "        - path: {type: PathPrefix, value: /.well-known/oauth-protected-resource/mcp}\n"
)
_ASM_MATCH = (
    "        - path: {type: PathPrefix, value: /.well-known/oauth-authorization-server/mcp}\n"
)


# The provider issues a refresh token with every sign-in, as Keycloak does (clients of the
# Broker do not ask for offline_access: its metadata does not offer it).
IDP_ENV = {"REFRESH_ALWAYS": "1"}


def broker_config(gateway_port: int, idp_port: int, backend: str, public: str) -> str:
    """`dpop_rs_support.config` in Broker mode: the route also serves the gateway's AS
    metadata."""
    text = config(gateway_port, idp_port, backend, public)
    for before, after in ((_MCP, _BROKER), (_PRM_MATCH, _PRM_MATCH + _ASM_MATCH)):
        assert before in text, before
        text = text.replace(before, after)
    return text


def token_request(
    url: str, form: dict[str, str], host: str, proof: str | None = None
) -> httpx.Response:
    """A POST to a replica's token endpoint (`url`), sent with the balancer's Host."""
    headers = {"host": host}
    if proof is not None:
        headers["dpop"] = proof
    return httpx.post(url, data=form, headers=headers, timeout=10)


def with_nonce(url: str, form: dict[str, str], host: str, htu: str, key: Key) -> httpx.Response:
    """A token request with a proof by `key`, made again with the nonce the endpoint asks for
    (as a DPoP client does); the answer to the second."""
    asked = token_request(url, form, host, proof_for(key, None, htu))
    assert asked.status_code == 400, asked.text
    assert asked.json()["error"] == "use_dpop_nonce", asked.json()
    nonce = asked.headers["dpop-nonce"]
    return token_request(url, form, host, proof_for(key, None, htu, nonce=nonce))
