"""A real MCP server (the `mcp` SDK) that requires an API key, as a backend behind a gateway's
`secretHeader` does: every request must carry `X-Api-Key` equal to the content of KEY_FILE
(read on each request, so a test rotates the key by rewriting the file), else 401. It keeps a
ledger of every `X-Api-Key` it was sent, accepted or not (`GET /debug/keys`), so a test can
prove what reached it and that nothing did.

Usage: mcp_backend_apikey.py PORT KEY_FILE"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer

PORT, KEY_FILE = int(sys.argv[1]), Path(sys.argv[2])
LEDGER: list[str | None] = []

server = MCPServer("api-key-backend")


@server.tool()
def ping() -> str:
    """Answers pong: the call got past the key check."""
    return "pong"


mcp_app = server.streamable_http_app()


async def _json(send, status: int, document: object) -> None:
    body = json.dumps(document).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    """The ledger, the key check, then the MCP app."""
    if scope["type"] != "http":
        await mcp_app(scope, receive, send)
        return
    if scope["path"] == "/debug/keys":
        await _json(send, 200, LEDGER)
        return
    sent = [v.decode("latin-1") for k, v in scope["headers"] if k == b"x-api-key"]
    LEDGER.append(sent[0] if len(sent) == 1 else None)
    if sent != [KEY_FILE.read_text().strip()]:
        await _json(send, 401, {"error": "invalid_api_key"})
        return
    await mcp_app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
