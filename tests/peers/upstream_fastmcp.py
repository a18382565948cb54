"""A third-party MCP server built with FastMCP that enforces its own OAuth, as such servers do:
FastMCP's `RemoteAuthProvider` (RFC 9728 metadata naming its authorization server, 401 with
`WWW-Authenticate: Bearer … resource_metadata=…`) over FastMCP's own token verifiers:

- `jwt`: `JWTVerifier` (signature by the AS's JWKS, `iss`, `aud` = this server's URL, `exp`,
  required scopes). A revoked grant's access token stays good until it expires, as with any
  self-contained token.
- `introspection`: `IntrospectionTokenVerifier` (RFC 7662 at the AS, `aud` checked): opaque
  tokens, and a revoked grant is refused at once.
- `jwt+introspection`: both must accept (for an AS that introspects its JWTs, like Keycloak).

Tools: `whoami` (who the token it was called with names), `echo`, and `confirm`, which asks
the user itself on the 2026-07-28 wire (its own `input_required` round with its own
`requestState`, FastMCP's guard pattern) and answers what it was told. Stateful Streamable HTTP
sessions at `/mcp`. `GET /debug/tokens` lists every bearer token that reached `/mcp`, so tests
can prove which token arrived (and that no other did); `GET /debug/requests` lists the JSON-RPC
messages POSTed there (what a proxy in front passed on).

Usage: upstream_fastmcp.py CONFIG.json, with keys port, issuer, jwks_uri, scopes (required),
verify, and for introspection: introspection_url, client_id, client_secret."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mcp_types
import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.server.auth import AccessToken, RemoteAuthProvider, TokenVerifier
from fastmcp.server.auth.providers.introspection import IntrospectionTokenVerifier
from fastmcp.server.auth.providers.jwt import JWTVerifier
from fastmcp.server.dependencies import get_access_token

CONFIG: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())
BASE = f"http://127.0.0.1:{CONFIG['port']}"
RESOURCE = f"{BASE}/mcp"
SCOPES: list[str] = CONFIG.get("scopes", [])
LEDGER: list[str] = []
MESSAGES: list[Any] = []


class AllOf(TokenVerifier):
    """A token is good when every verifier accepts it; the last one's view is kept."""

    def __init__(self, *verifiers: TokenVerifier) -> None:
        super().__init__(required_scopes=SCOPES)
        self.verifiers = verifiers

    async def verify_token(self, token: str) -> AccessToken | None:
        accepted = None
        for verifier in self.verifiers:
            accepted = await verifier.verify_token(token)
            if accepted is None:
                return None
        return accepted


def verifier() -> TokenVerifier:
    """The verifier CONFIG names."""
    kinds = CONFIG["verify"].split("+")
    assert set(kinds) <= {"jwt", "introspection"}, CONFIG["verify"]
    chosen: list[TokenVerifier] = []
    if "jwt" in kinds:
        chosen.append(
            JWTVerifier(
                jwks_uri=CONFIG["jwks_uri"],
                issuer=CONFIG["issuer"],
                audience=RESOURCE,
                required_scopes=SCOPES,
            )
        )
    if "introspection" in kinds:
        chosen.append(
            IntrospectionTokenVerifier(
                introspection_url=CONFIG["introspection_url"],
                client_id=CONFIG["client_id"],
                client_secret=CONFIG["client_secret"],
                audience=RESOURCE,
                required_scopes=SCOPES,
            )
        )
    return chosen[0] if len(chosen) == 1 else AllOf(*chosen)


server = FastMCP(
    "upstream-fastmcp",
    auth=RemoteAuthProvider(
        token_verifier=verifier(),
        authorization_servers=[CONFIG["issuer"]],
        base_url=BASE,
        scopes_supported=SCOPES,
        resource_name="Upstream FastMCP server",
    ),
)


@server.tool
def whoami() -> str:
    """Who the access token this call came with names, and for which client it was issued."""
    token = get_access_token()
    claims = dict(token.claims or {}) if token else {}
    return json.dumps(
        {
            "sub": claims.get("sub"),
            "username": claims.get("preferred_username", claims.get("username", claims.get("sub"))),
            "client_id": token.client_id if token else None,
            "scopes": token.scopes if token else [],
            "aud": claims.get("aud"),
        }
    )


@server.tool
def echo(text: str) -> str:
    """The text it was given."""
    return text


@server.tool
async def confirm(ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Asks the user whether to go on (a form elicitation of its own), then says the answer."""
    answers = ctx.input_responses
    if not answers:
        form = mcp_types.ElicitRequestFormParams(
            message="Go on?",
            requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
        )
        ask = mcp_types.ElicitRequest(params=form)
        return mcp_types.InputRequiredResult(
            input_requests={"confirm": ask}, request_state="upstream-round-1"
        )
    answer = answers["confirm"]
    content = answer.content if isinstance(answer, mcp_types.ElicitResult) else None
    return json.dumps({"state": ctx.request_state, "content": content})


mcp_app = server.http_app(path="/mcp")


def recording(receive):
    """`receive`, keeping the body it reads in MESSAGES once whole."""
    chunks: list[bytes] = []

    async def received():
        message = await receive()
        if message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                try:
                    MESSAGES.append(json.loads(b"".join(chunks)))
                except ValueError:
                    MESSAGES.append(b"".join(chunks).decode(errors="replace"))
        return message

    return received


async def app(scope, receive, send):
    """The ledgers of bearer tokens and messages, then the FastMCP app."""
    ledgers = {"/debug/tokens": LEDGER, "/debug/requests": MESSAGES}
    if scope["type"] == "http" and scope["path"] in ledgers:
        body = json.dumps(ledgers[scope["path"]]).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    if scope["type"] == "http" and scope["path"].startswith("/mcp"):
        for name, value in scope["headers"]:
            if name == b"authorization":
                LEDGER.append(value.decode(errors="replace").removeprefix("Bearer "))
        if scope["method"] == "POST":
            receive = recording(receive)
    await mcp_app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=CONFIG["port"], log_level="warning")
