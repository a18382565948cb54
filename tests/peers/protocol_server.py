"""An ASGI app served by uvicorn on the gateway's own HTTP protocol (connections.protocol_class),
for the real-socket tests of what that protocol reads and writes. Each path answers one way;
some take what they put in a response header from the query string, as a backend or a stage
could pass along what a client sent.

    python protocol_server.py PORT
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.parse

import uvicorn

from mcp_oauth_gateway.asgi import Limits
from mcp_oauth_gateway.connections import ConnectionGuard, protocol_class
from mcp_oauth_gateway.dataplane.metrics import ConnectionCounts

STATS = {"disconnects": 0, "requests": 0}


async def read_all(receive) -> bytes:
    body = b""
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def start(status: int, headers) -> dict:
    return {"type": "http.response.start", "status": status, "headers": headers}


def body(data: bytes, more: bool = False) -> dict:
    return {"type": "http.response.body", "body": data, "more_body": more}


async def echo(scope, receive, send, arg):
    data = await read_all(receive)
    headers = [
        (b"content-length", str(len(data)).encode()),
        (b"x-method", scope["method"].encode()),
        (b"x-version", scope["http_version"].encode()),
        (b"x-path", scope["raw_path"]),
        (b"x-query", scope["query_string"]),
    ]
    await send(start(200, headers))
    await send(body(data))


async def header_value(scope, receive, send, arg):
    await send(start(200, [(b"x-echo", arg), (b"content-length", b"2")]))
    await send(body(b"ok"))


async def header_name(scope, receive, send, arg):
    await send(start(200, [(arg, b"1"), (b"content-length", b"2")]))
    await send(body(b"ok"))


async def status(scope, receive, send, arg):
    await send(start(int(arg), [(b"x-status", arg)]))
    await send(body(b"a body where none may be"))


async def not_modified(scope, receive, send, arg):
    await send(start(304, [(b"content-length", b"100"), (b"etag", b'"v1"')]))
    await send(body(b"x" * 100))


async def stream(scope, receive, send, arg):
    await send(start(200, [(b"content-type", b"text/event-stream")]))
    for part in (b"data: 1\n\n", b"", b"data: 2\n\n"):
        await send(body(part, more=True))
    await send(body(b"data: 3\n\n"))


async def sized(scope, receive, send, arg):
    announced, sent = arg.split(b",")
    await send(start(200, [(b"content-length", announced)]))
    await send(body(b"x" * int(sent)))


async def framing(scope, receive, send, arg):
    headers = [tuple(part.split(b"=", 1)) for part in arg.split(b"&")]
    await send(start(200, headers))
    await send(body(b"hello"))


async def big(scope, receive, send, arg):
    size, part = int(arg), 1 << 16
    await send(start(200, [(b"content-length", arg)]))
    for offset in range(0, size, part):
        chunk = bytes([65 + (offset // part) % 26]) * min(part, size - offset)
        await send(body(chunk, more=offset + part < size))


async def wait_for_disconnect(scope, receive, send, arg):
    await send(start(200, [(b"content-type", b"text/event-stream")]))
    await send(body(b"data: open\n\n", more=True))
    while (await receive())["type"] != "http.disconnect":
        pass
    STATS["disconnects"] += 1


async def stats(scope, receive, send, arg):
    data = json.dumps(STATS).encode()
    await send(start(200, [(b"content-length", str(len(data)).encode())]))
    await send(body(data))


async def fail(scope, receive, send, arg):
    raise RuntimeError("the app failed before answering")


ROUTES = {
    "/echo": echo,
    "/header-value": header_value,
    "/header-name": header_name,
    "/status": status,
    "/not-modified": not_modified,
    "/stream": stream,
    "/sized": sized,
    "/framing": framing,
    "/big": big,
    "/wait-for-disconnect": wait_for_disconnect,
    "/stats": stats,
    "/fail": fail,
}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    STATS["requests"] += 1
    arg = urllib.parse.unquote_to_bytes(scope["query_string"])
    await ROUTES[scope["path"]](scope, receive, send, arg)
    await asyncio.sleep(0)


def main(port: int) -> None:
    guard = ConnectionGuard(Limits(max_connections=64), ConnectionCounts())
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http=protocol_class(guard),
        log_level="warning",
        access_log=False,
        server_header=False,
        lifespan="off",
        ws="none",
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main(int(sys.argv[1]))
