"""A real MCP server (the `mcp` SDK) that validates bearer tokens itself, as an MCP server must:
RS256 JWTs from ISSUER (keys from its JWKS), `aud` must include AUDIENCE. It keeps a ledger of
every bearer token it was sent (`GET /debug/tokens`), so tests can prove which token arrived and
that the caller's did not. Tool `whoami` answers the token's `sub` and `aud`.

Usage: mcp_backend_auth.py PORT ISSUER JWKS_URL AUDIENCE"""

from __future__ import annotations

import json
import sys

import httpx
import uvicorn
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

PORT, ISSUER, JWKS_URL, AUDIENCE = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
LEDGER: list[str] = []


class Verifier:
    """The backend's own check: signature, issuer, audience, expiry."""

    async def verify_token(self, token: str) -> AccessToken | None:
        LEDGER.append(token)
        async with httpx.AsyncClient() as client:
            keys = KeySet.import_key_set((await client.get(JWKS_URL)).json())
        try:
            claims = jwt.decode(token, keys).claims
            jwt.JWTClaimsRegistry(
                iss={"essential": True, "value": ISSUER}, exp={"essential": True}
            ).validate(claims)
        except (JoseError, ValueError):
            return None
        audiences = claims.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else audiences or []
        if AUDIENCE not in audiences:
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("azp", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            subject=claims.get("sub"),
            claims=claims,
        )


server = MCPServer(
    "credential-checking-backend",
    token_verifier=Verifier(),
    auth=AuthSettings(issuer_url=ISSUER, resource_server_url=f"http://127.0.0.1:{PORT}/mcp"),
)


@server.tool()
def whoami() -> str:
    """Who the token the backend received names, and for whom it was issued."""
    token = get_access_token()
    claims = (token.claims or {}) if token else {}
    return json.dumps({"sub": claims.get("sub"), "aud": claims.get("aud")})


mcp_app = server.streamable_http_app()


async def app(scope, receive, send):
    """The ledger, or the MCP app."""
    if scope["type"] == "http" and scope["path"] == "/debug/tokens":
        body = json.dumps(LEDGER).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    await mcp_app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
