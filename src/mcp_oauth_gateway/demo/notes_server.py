"""The demo's "third-party" MCP server: a notes service that trusts only its own authorization
server (the demo's second dev identity provider), the way GitHub's or Atlassian's MCP servers
trust theirs. It knows nothing of the gateway: it answers 401 with RFC 9728 metadata naming its
authorization server, and serves a caller only with an access token that server issued for it
(issuer, audience = this server's URL, the `notes` scope, signature from the server's JWKS).
Behind the gateway, `userOAuth` gets each user such a token of their own.

Needs the `mcp` package (`pip install 'mcp-oauth-gateway[demo]'`).
"""

from __future__ import annotations

import argparse
import time

import httpx
import uvicorn
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from ..oauth_scopes import scope_tokens

SCOPE = "notes"
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384"]
# A token signed with a key it has not seen yet makes it read the JWKS again, at most this often.
REFETCH_AFTER = 30.0


class JwtVerifier:
    """The server's own check of a bearer token: a JWT of `issuer`, for `audience`."""

    def __init__(self, issuer: str, audience: str):
        self.issuer = issuer
        self.audience = audience
        self._keys: KeySet | None = None
        self._fetched = 0.0

    async def _key_set(self, again: bool) -> KeySet:
        if self._keys is None or (again and time.monotonic() - self._fetched > REFETCH_AFTER):
            async with httpx.AsyncClient(timeout=10) as http:
                discovery = await http.get(f"{self.issuer}/.well-known/openid-configuration")
                discovery.raise_for_status()
                jwks = await http.get(discovery.json()["jwks_uri"])
                jwks.raise_for_status()
            self._keys, self._fetched = KeySet.import_key_set(jwks.json()), time.monotonic()
        return self._keys

    async def _claims(self, token: str) -> dict[str, object] | None:
        for again in (False, True):
            try:
                return jwt.decode(token, await self._key_set(again), algorithms=ALGORITHMS).claims
            except (JoseError, ValueError):
                continue
        return None

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's grant, or None (the SDK answers 401) for any token not meant for us."""
        try:
            claims = await self._claims(token)
        except (httpx.HTTPError, KeyError, ValueError):
            return None  # its authorization server unreachable: nothing is let in
        if claims is None:
            return None
        try:
            jwt.JWTClaimsRegistry(
                leeway=60,
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.audience},
                exp={"essential": True},
                sub={"essential": True},
            ).validate(claims)
        except JoseError:
            return None
        exp = claims["exp"]
        return AccessToken(
            token=token,
            client_id=str(claims.get("azp", "")),
            scopes=scope_tokens(str(claims.get("scope", ""))),
            expires_at=exp if isinstance(exp, int) else None,
            subject=str(claims["sub"]),
            claims=claims,
        )


# Each user's notes, by (issuer, subject): in memory, gone when the server stops.
NOTES: dict[tuple[str, str], list[str]] = {}


def _caller() -> tuple[str, str, str]:
    """(issuer, subject, user name) of the token this call came with."""
    token = get_access_token()
    claims = (token.claims or {}) if token else {}
    issuer, subject = str(claims.get("iss", "")), str(claims.get("sub", ""))
    return issuer, subject, str(claims.get("preferred_username") or subject)


def build(port: int, issuer: str) -> MCPServer:
    """The notes server on `port`, trusting the authorization server `issuer`."""
    resource = f"http://127.0.0.1:{port}/mcp"
    server = MCPServer(
        "demo notes (a third-party MCP server)",
        instructions="Your own notes. This server accepts only tokens of its own "
        "authorization server.",
        token_verifier=JwtVerifier(issuer, resource),
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=resource,
            required_scopes=[SCOPE],
            validate_token_resource=False,  # the verifier checks the audience itself
        ),
    )

    @server.tool()
    def whoami() -> dict[str, str]:
        """Who this server thinks you are: the user its own authorization server signed in."""
        token = get_access_token()
        issuer, subject, name = _caller()
        client = token.client_id if token else ""
        return {"user": name, "subject": subject, "issuer": issuer, "client": client}

    @server.tool()
    def add_note(text: str) -> str:
        """Keep a note (yours only)."""
        issuer, subject, name = _caller()
        NOTES.setdefault((issuer, subject), []).append(text)
        return f"noted for {name}"

    @server.tool()
    def list_notes() -> list[str]:
        """Your notes, oldest first."""
        issuer, subject, _ = _caller()
        return list(NOTES.get((issuer, subject), []))

    return server


def main() -> None:
    """Serve on 127.0.0.1 (`--port`), trusting `--issuer`."""
    parser = argparse.ArgumentParser(description="the demo's notes MCP server (own OAuth)")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--issuer", required=True, help="its authorization server's issuer")
    args = parser.parse_args()
    app = build(args.port, args.issuer).streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
