"""A real MCP server (the `mcp` SDK) used as the gateway's backend in tests.

It records the headers of every request it receives so tests can see what the gateway forwarded
(`GET /debug/requests`), and offers a tool that streams progress notifications over SSE.
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("gateway-test-backend")
RECEIVED: list[dict[str, object]] = []
LOAD_MARKS: set[str] = set()  # every `Mcp-Param-Load` value seen (the load test's ledger)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Count to n, reporting progress after each step."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await asyncio.sleep(0.05)
    return f"counted to {n}"


mcp_app = server.streamable_http_app()


async def app(scope, receive, send):
    """Record requests, answer the debug endpoint, hand the rest to the MCP app."""
    if scope["type"] == "http" and scope["path"] == "/debug/load":
        import json

        body = json.dumps(sorted(LOAD_MARKS)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    if scope["type"] == "http" and scope["path"] == "/debug/requests":
        import json

        body = json.dumps(RECEIVED).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    if scope["type"] == "http":
        for name, value in scope["headers"]:
            if name == b"mcp-param-load":
                LOAD_MARKS.add(value.decode("latin-1"))
        RECEIVED.append(
            {
                "method": scope["method"],
                "path": scope["path"],
                "headers": [
                    [k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]
                ],
            }
        )
        del RECEIVED[:-200]
    await mcp_app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
