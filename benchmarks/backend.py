"""Benchmark backends: a static JSON responder (an MCP-sized `tools/call` result) and an SSE
stream, as one raw ASGI app on uvicorn (uvloop + httptools)."""

from __future__ import annotations

import asyncio
import sys

import uvicorn

RESULT = (
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"5"}],'
    b'"structuredContent":{"result":5},"isError":false}}'
)
JSON_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(RESULT)).encode()),
]


async def app(scope, receive, send):  # noqa: ANN001, ANN201
    """GET: an SSE stream of 5 events 100 ms apart; POST: the static JSON result."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    if scope["method"] == "GET":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        for i in range(5):
            await send(
                {"type": "http.response.body", "body": f"data: {i}\n\n".encode(), "more_body": True}
            )
            await asyncio.sleep(0.1)
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": RESULT})


if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
