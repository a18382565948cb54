"""The demo MCP server behind the gateway: a few useful tools, one of which streams progress.

Needs the `mcp` package (`pip install 'mcp-oauth-gateway[demo]'`).
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer(
    "mcp-oauth-gateway demo",
    instructions=(
        "A demo server behind mcp-oauth-gateway. Every call reached it only after the gateway "
        "verified the caller's token and group."
    ),
)


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@server.tool()
def word_count(text: str) -> dict[str, int]:
    """Count the words, characters and lines of a text."""
    return {
        "words": len(text.split()),
        "characters": len(text),
        "lines": text.count("\n") + 1 if text else 0,
    }


@server.tool()
def current_time(timezone: str = "UTC") -> str:
    """The current time in an IANA time zone, e.g. Europe/Paris."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {timezone!r}; use an IANA name such as Europe/Paris"
    return datetime.now(zone).isoformat(timespec="seconds")


@server.tool()
async def countdown(seconds: int, ctx: Context) -> str:
    """Count down (at most 10 s), reporting progress every second over SSE."""
    seconds = max(1, min(seconds, 10))
    for done in range(1, seconds + 1):
        await asyncio.sleep(1)
        await ctx.report_progress(done, seconds, f"{seconds - done} s left")
    return f"countdown of {seconds} s finished"


def main() -> None:
    """Serve on 127.0.0.1 (`--port`)."""
    parser = argparse.ArgumentParser(description="the demo MCP server (streamable HTTP)")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
