"""The issuer, signing key and keyset the token tests share, the claims of a good access token,
the MCP endpoint a policy compiles to, and the header that carries a token."""

from __future__ import annotations

from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.controlplane.snapshot import CompiledMcp
from support import claims_for, jwks_of, new_key

ISSUER = "http://idp/application/o/mcp/"
KEY = new_key("k1")
KEYSET = parse_jwks(jwks_of(KEY), version=1)
# Every DPoP proof algorithm, in the order the challenge and the metadata offer them (every
# provider takes DPoP tokens unless its `dpop` is Disabled).
ALL_DPOP_ALGS = [
    *("ES256", "ES384", "ES512", "EdDSA", "Ed25519"),
    *("PS256", "PS384", "PS512", "RS256", "RS384", "RS512"),
]


def good(**overrides: object) -> dict[str, object]:
    claims = claims_for(ISSUER, "mcp-public")
    claims.update(overrides)
    return claims


def compiled_mcp(provider: str | None) -> CompiledMcp:
    return CompiledMcp(
        provider=provider,
        client_id="mcp-public",  # type: ignore[arg-type]
        resource="http://gw.test/mcp",
        mcp_path="/mcp",
        scopes_supported=("openid",),
        bearer_methods_supported=("header",),
        extra_metadata=(),
    )


def bearer(token: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {token}".encode())
