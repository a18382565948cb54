"""The httptools upstream pool against a real uvicorn server in the same event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import uvicorn

from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.proxy.upstream import UpstreamError
from support import free_port


async def backend_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body, chunks = b"", 0
    while True:
        message = await receive()
        body += message.get("body", b"")
        chunks += 1
        if not message.get("more_body"):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    if scope["path"] == "/slow":
        await asyncio.sleep(0.5)
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(3):
            await send({"type": "http.response.body", "body": f"data: {i}\n\n".encode(),
                        "more_body": True})
            await asyncio.sleep(0.02)
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/broken":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"100")]})
        await send({"type": "http.response.body", "body": b"short", "more_body": True})
        raise RuntimeError("backend dies mid-body")
    payload = json.dumps({"length": len(body), "te": headers.get("transfer-encoding"),
                          "cl": headers.get("content-length"),
                          "client": scope["client"][1]}).encode()
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"x-test", b"yes")]})
    await send({"type": "http.response.body", "body": payload})


@pytest.fixture
async def backend():
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(backend_app, host="127.0.0.1", port=port,
                                           log_level="critical", timeout_keep_alive=1,
                                           lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


async def read(response) -> bytes:
    out = b"".join([chunk async for chunk in response.chunks()])
    response.release()
    return out


HOST = [(b"host", b"backend")]


async def test_bytes_body_keepalive_and_headers(backend):
    pool = RawUpstream()
    first = await pool.request("POST", f"{backend}/echo", HOST, b"x" * 5000, 10)
    assert first.status == 201
    assert (b"x-test", b"yes") in first.headers
    one = json.loads(await read(first))
    assert one["length"] == 5000
    assert one["cl"] == "5000"
    second = json.loads(await read(await pool.request("POST", f"{backend}/echo", HOST, b"", 10)))
    assert second["client"] == one["client"], "the connection is reused"
    await pool.close()


async def test_streamed_request_body_is_chunked(backend):
    async def body() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"y" * 1000

    pool = RawUpstream()
    echoed = json.loads(await read(await pool.request("POST", f"{backend}/echo", HOST,
                                                      body(), 10)))
    assert echoed == {**echoed, "length": 4000, "te": "chunked"}
    await pool.close()


async def test_streamed_response_arrives_in_pieces(backend):
    pool = RawUpstream()
    response = await pool.request("GET", f"{backend}/stream", HOST, b"", 10)
    pieces = [chunk async for chunk in response.chunks()]
    response.release()
    assert b"".join(pieces) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert len(pieces) >= 2
    await pool.close()


async def test_connection_closed_by_backend_is_replaced(backend):
    pool = RawUpstream()
    first = json.loads(await read(await pool.request("POST", f"{backend}/echo", HOST, b"a", 10)))
    await asyncio.sleep(1.5)  # past the backend's keep-alive timeout: it closes the socket
    second = json.loads(await read(await pool.request("POST", f"{backend}/echo", HOST, b"b", 10)))
    assert second["length"] == 1
    assert second["client"] != first["client"]
    await pool.close()


async def test_backend_dying_mid_body_is_an_error(backend):
    pool = RawUpstream()
    response = await pool.request("GET", f"{backend}/broken", HOST, b"", 10)
    with pytest.raises(UpstreamError, match="broke the response body"):
        async for _ in response.chunks():
            pass
    response.release()
    await pool.close()


async def test_unreachable_backend():
    with pytest.raises(UpstreamError, match="cannot connect"):
        await RawUpstream().request("GET", f"http://127.0.0.1:{free_port()}/", HOST, b"", 10)


async def test_slow_backend_times_out(backend):
    pool = RawUpstream()
    with pytest.raises(TimeoutError, match=r"no response headers within 0\.01s"):
        await pool.request("GET", f"{backend}/slow", HOST, b"", 0.01)
    await pool.close()
