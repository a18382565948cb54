"""A small real MCP server (the `mcp` SDK) that says which server it is, for federation tests:
`python mcp_named.py NAME PORT [json] [--tls CERT KEY]` serves `whoami`, `add`, `count`
(progress over SSE), a prompt `greet` and a resource `note://NAME` and template
`note://{topic}` at /mcp; with `json` it answers plain JSON instead of event streams, with
`--tls` it serves https with that certificate and key (PEM files)."""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

NAME = sys.argv[1]
server = MCPServer(f"federation-{NAME}", instructions=f"Server {NAME}.")


@server.tool()
def whoami() -> str:
    """Name this server."""
    return NAME


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Count to n, reporting progress after each step."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await asyncio.sleep(0.01)
    return f"{NAME} counted to {n}"


@server.prompt()
def greet(who: str) -> str:
    """Greet someone."""
    return f"{NAME} greets {who}"


@server.resource(f"note://{NAME}")
def note() -> str:
    """This server's note."""
    return f"note of {NAME}"


@server.resource("note://topics/{topic}")
def topic(topic: str) -> str:
    """A note on a topic."""
    return f"{NAME} on {topic}"


if __name__ == "__main__":
    options = sys.argv[3:]
    tls: dict[str, str] = {}
    if "--tls" in options:
        at = options.index("--tls")
        tls = {"ssl_certfile": options[at + 1], "ssl_keyfile": options[at + 2]}
        del options[at : at + 3]
    app = server.streamable_http_app(json_response=options == ["json"])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", **tls)
