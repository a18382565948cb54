"""The MCP server behind every proxy of `benchmarks/peers.py`, on raw asyncio sockets (uvloop)
and httptools, so that it costs little beside the proxies it serves:

    python benchmarks/peers_backend.py PORT JWKS_FILE

POST (any path): one JSON-RPC message. `initialize` is answered with an `Mcp-Session-Id`, as a
stateful server does; `tools/list` lists `add` and `delete`; `tools/call` of either gets the same
small result; `ping` an empty one; a notification 202; any other method -32601.
GET /.well-known/jwks.json: JWKS_FILE (mcp-proxy only fetches keys). GET /calls: how many
`tools/call` of each tool arrived, for the enforcement checks. Other GETs: 405, there is no
server-initiated stream. DELETE (a session's end): 204.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httptools
import uvloop

TOOLS = {
    "tools": [
        {
            "name": name,
            "description": text,
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        }
        for name, text in (("add", "Add two integers."), ("delete", "The tool the rule forbids."))
    ]
}
CALL_RESULT = (
    b'{"content":[{"type":"text","text":"5"}],"structuredContent":{"result":5},"isError":false}'
)

NOT_FOUND = b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}'


def _head(status: bytes, length: int, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n" % (
        status,
        length,
        extra,
    )


def _answer(request_id: Any, result: bytes) -> bytes:
    """A JSON-RPC response carrying the request's own id."""
    return b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (json.dumps(request_id).encode(), result)


class Backend:
    """What the server answers, and the `tools/call`s it received per tool."""

    def __init__(self, jwks: bytes) -> None:
        self.jwks = jwks
        self.calls: Counter[str] = Counter()

    def post(self, body: bytes) -> bytes:
        """The whole HTTP response to one POSTed JSON-RPC message."""
        try:
            message = json.loads(body)
            method, request_id = message["method"], message.get("id")
        except (ValueError, TypeError, KeyError):
            error = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
            return _head(b"400 Bad Request", len(error)) + error
        if request_id is None:
            return b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"
        extra = b""
        if method == "tools/call":
            self.calls[str((message.get("params") or {}).get("name"))] += 1
            out = _answer(request_id, CALL_RESULT)
        elif method == "initialize":
            # A session id, as stateful servers give: mcp-proxy's HTTP client sends its requests
            # to a backend that gave none one at a time (tower-mcp 0.23, client/http.rs).
            version = (message.get("params") or {}).get("protocolVersion", "2025-11-25")
            result = {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "peers-backend", "version": "1"},
            }
            out = _answer(request_id, json.dumps(result).encode())
            extra = b"mcp-session-id: %s\r\n" % secrets.token_hex(16).encode()
        elif method == "tools/list":
            out = _answer(request_id, json.dumps(TOOLS).encode())
        elif method == "ping":
            out = _answer(request_id, b"{}")
        else:
            out = NOT_FOUND % json.dumps(request_id).encode()
        return _head(b"200 OK", len(out), extra) + out

    def get(self, path: bytes) -> bytes:
        """The whole HTTP response to a GET."""
        if path == b"/.well-known/jwks.json":
            return _head(b"200 OK", len(self.jwks), b"cache-control: max-age=3600\r\n") + self.jwks
        if path == b"/calls":
            body = json.dumps(self.calls).encode()
            return _head(b"200 OK", len(body)) + body
        return b"HTTP/1.1 405 Method Not Allowed\r\nallow: POST\r\ncontent-length: 0\r\n\r\n"


class _Connection(asyncio.Protocol):
    """One client connection: requests parsed by httptools, answered in order."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.body = b"", []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        if method == b"POST":
            out = self.backend.post(b"".join(self.body))
        elif method == b"GET":
            out = self.backend.get(self.url.split(b"?", 1)[0])
        else:
            out = b"HTTP/1.1 204 No Content\r\n\r\n"
        self.transport.write(out)
        if not self.parser.should_keep_alive():
            self.transport.close()


async def serve(port: int, jwks: bytes) -> None:
    """Serve until killed."""
    backend = Backend(jwks)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(backend), "127.0.0.1", port, backlog=4096)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), Path(sys.argv[2]).read_bytes()))
