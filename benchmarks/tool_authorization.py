"""Micro-benchmark: the cost of the tool-level authorization stage per request, in process.

Runs the stage over an in-memory ASGI backend and the backend alone, and prints the difference
for an allowed `tools/call` and for a `tools/list` of 20 tools (two rules, one token).
Usage: python benchmarks/tool_authorization.py [N]"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from mcp_oauth_gateway.asgi import (
    CLAIMS_KEY,
    TOKEN_KEY,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
)
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.snapshot import CompiledAuthorization
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization

LISTED = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "tools": [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(20)]
        },
    }
).encode()
CALL = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "t1", "arguments": {"a": 1}},
    }
).encode()
LIST = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode()


async def backend(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": LISTED})


async def discard(message: Message) -> None:
    return None


async def per_request_us(app: ASGIApp, body: bytes, n: int) -> float:
    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    started = time.perf_counter()
    for _ in range(n):
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [],
            TOKEN_KEY: "token",
            CLAIMS_KEY: {"sub": "alice", "groups": ["users"]},
        }
        await app(scope, receive, discard)
    return (time.perf_counter() - started) / n * 1e6


async def main(n: int) -> None:
    rules = CompiledAuthorization(
        "Allow",
        (
            compile_expression('mcp.tool.name in ["t1", "t2"]', mcp=True),
            compile_expression('"admin" in jwt.groups', mcp=True),
        ),
    )
    stage = McpAuthorization(backend, rules, 1 << 20)
    for label, body in (("tools/call, allowed", CALL), ("tools/list, 20 tools", LIST)):
        await per_request_us(stage, body, n // 10)  # warm-up
        base = await per_request_us(backend, body, n)
        with_stage = await per_request_us(stage, body, n)
        print(f"{label}: +{with_stage - base:.1f} µs per request")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000))
