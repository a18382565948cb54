"""A misbehaving backend for fault tests: slow answers, streams that break, streams that run
until the client goes away (and counts how often the gateway let it know)."""

from __future__ import annotations

import asyncio
import json
import sys

import uvicorn

STATS = {"disconnects": 0, "forever_started": 0}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    more = True
    while more:  # the request body first, so the next receive() can only be the disconnect
        more = (await receive()).get("more_body", False)
    if path == "/stats":
        body = json.dumps(STATS).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    if path == "/slow":
        await asyncio.sleep(3)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"late"})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    if path == "/sse-break":
        for i in range(2):
            await send({"type": "http.response.body", "body": f"data: {i}\n\n".encode(),
                        "more_body": True})
        raise RuntimeError("the backend dies in the middle of the stream")
    STATS["forever_started"] += 1
    waiter = asyncio.ensure_future(receive())
    i = 0
    while True:
        await send({"type": "http.response.body", "body": f"data: {i}\n\n".encode(),
                    "more_body": True})
        i += 1
        done, _ = await asyncio.wait({waiter}, timeout=0.05)
        if done and waiter.result()["type"] == "http.disconnect":
            STATS["disconnects"] += 1
            return


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="critical",
                lifespan="off")
