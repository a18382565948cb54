"""The httptools upstream pool against a real uvicorn server in the same event loop, and against
a scripted raw backend for what uvicorn never sends (interim responses, bodies where none may
be, unsolicited bytes) or never does (keeping idle connections open forever)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn
from fault_backend import RawBackend, Seen

from mcp_oauth_gateway.proxy import pool as pool_module
from mcp_oauth_gateway.proxy.pool import MAX_IDLE, RawUpstream
from mcp_oauth_gateway.proxy.upstream import UpstreamError
from support import free_port


async def _read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _start(send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _body(send, body: bytes, more: bool = False) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def backend_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = await _read_body(receive)
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    if scope["path"] == "/slow":
        await asyncio.sleep(0.5)
    if scope["path"] == "/stream":
        await _start(send, 200, [(b"content-type", b"text/event-stream")])
        for i in range(3):
            await _body(send, f"data: {i}\n\n".encode(), more=True)
            await asyncio.sleep(0.02)
        await _body(send, b"")
        return
    if scope["path"] == "/sized":
        # For HEAD uvicorn sends the length and no body.
        await _start(send, 200, [(b"content-length", b"11"), (b"x-test", b"sized")])
        await _body(send, b"hello world")
        return
    if scope["path"] == "/broken":
        await _start(send, 200, [(b"content-length", b"100")])
        await _body(send, b"short", more=True)
        raise RuntimeError("backend dies mid-body")
    payload = {
        "length": len(body),
        "te": headers.get("transfer-encoding"),
        "cl": headers.get("content-length"),
        "client": scope["client"][1],
    }
    await _start(send, 201, [(b"content-type", b"application/json"), (b"x-test", b"yes")])
    await _body(send, json.dumps(payload).encode())


async def served(keep_alive: float) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            backend_app,
            host="127.0.0.1",
            port=port,
            log_level="critical",
            timeout_keep_alive=keep_alive,
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


@pytest.fixture
async def backend() -> AsyncIterator[str]:
    """uvicorn keeping idle connections for ten minutes: a connection a test reuses is not
    closed under it by a pause of a loaded machine between two of its requests."""
    async for url in served(keep_alive=600):
        yield url


@pytest.fixture
async def closing_backend() -> AsyncIterator[str]:
    """uvicorn closing idle connections after a second, as a test that waits for it needs."""
    async for url in served(keep_alive=1):
        yield url


async def read(response) -> bytes:
    out = b"".join([chunk async for chunk in response.chunks()])
    response.release()
    return out


HOST = [(b"host", b"backend")]


async def test_bytes_body_keepalive_and_headers(backend):
    pool = RawUpstream(idle_limit=PATIENT)
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
    echoed = json.loads(await read(await pool.request("POST", f"{backend}/echo", HOST, body(), 10)))
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


async def test_connection_closed_by_backend_is_replaced(closing_backend):
    backend = closing_backend
    pool = RawUpstream()
    first = json.loads(await read(await pool.request("POST", f"{backend}/echo", HOST, b"a", 10)))
    # Wait for the backend's keep-alive timeout to close the pooled socket.
    idle = next(iter(pool._pools.values())).idle
    deadline = time.monotonic() + 15
    while not (idle and idle[-1].closed):
        assert time.monotonic() < deadline, "the backend never closed the idle connection"
        await asyncio.sleep(0.02)
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


# Failure bound for exchanges that used to hang until the backend gave up on the connection.
BOUND = 3.0
# An idle limit no test waits for: what is reused or counted cannot have been reaped meanwhile.
PATIENT = 600.0


async def until(predicate, what: str, bound: float = 5.0) -> None:
    """Poll `predicate` on the event loop until it holds (fails after `bound` seconds)."""
    try:
        async with asyncio.timeout(bound):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out after {bound}s waiting for {what}") from None


async def exchange(
    pool: RawUpstream, method: str, url: str, headers=HOST
) -> tuple[int, dict[bytes, bytes], bytes]:
    """Status, headers (lower-cased names) and body, within BOUND seconds."""
    async with asyncio.timeout(BOUND):
        response = await pool.request(method, url, headers, b"", 10)
        body = await read(response)
    return response.status, {k.lower(): v for k, v in response.headers}, body


def ok(body: bytes = b"ok", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


@pytest.fixture
async def raw():
    """Start a RawBackend with the given answer; stopped at the end."""
    started: list[RawBackend] = []

    async def start(answer) -> RawBackend:
        started.append(await RawBackend(answer).start())
        return started[-1]

    yield start
    for backend in started:
        await backend.stop()


async def test_head_is_answered_without_waiting_for_a_body(backend):
    pool = RawUpstream()
    status, headers, body = await exchange(pool, "HEAD", f"{backend}/echo")
    assert (status, headers[b"x-test"], body) == (201, b"yes", b"")
    status, headers, body = await exchange(pool, "HEAD", f"{backend}/sized")
    assert (status, headers[b"content-length"], headers[b"x-test"], body) == (
        200,
        b"11",
        b"sized",
        b"",
    )
    _, _, after = await exchange(pool, "POST", f"{backend}/echo")
    assert json.loads(after)["length"] == 0
    await pool.close()


@pytest.mark.parametrize(
    ("framing", "sent", "reused"),
    [
        (b"content-length: 12\r\n", b"body of HEAD", False),  # sent anyway: must reach nobody
        (b"content-length: 12\r\n", b"", False),
        (b"transfer-encoding: chunked\r\n", b"0\r\n\r\n", False),
        (b"", b"", False),  # no framing at all: the parser cannot say the message ended
        (b"content-length: 0\r\n", b"", True),
    ],
)
async def test_head_reuses_a_connection_only_when_its_framing_is_certain(
    raw, framing, sent, reused
):
    def answer(seen: Seen) -> bytes:
        if seen.method == "HEAD":
            return b"HTTP/1.1 200 OK\r\nx-head: yes\r\n" + framing + b"\r\n" + sent
        return ok(b"body of GET")

    backend = await raw(answer)
    pool = RawUpstream(idle_limit=PATIENT)
    status, headers, body = await exchange(pool, "HEAD", f"{backend.url}/")
    assert (status, headers[b"x-head"], body) == (200, b"yes", b"")
    assert await exchange(pool, "GET", f"{backend.url}/") == (
        200,
        {b"content-length": b"11"},
        b"body of GET",
    )
    assert (backend.seen[1].connection == 1) is reused
    if not reused:
        await until(lambda: backend.open == 1, "the backend to see the HEAD connection closed")
    await pool.close()


@pytest.mark.parametrize(
    "interim",
    [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n",
    ],
)
async def test_interim_responses_are_skipped_for_the_final_one(raw, interim):
    async def answer(seen: Seen) -> bytes:
        return (
            interim + ok(b"final", b"x-final: yes\r\n") if seen.path == "/together" else ok(b"next")
        )

    backend = await raw(answer)
    pool = RawUpstream(idle_limit=PATIENT)
    status, headers, body = await exchange(pool, "POST", f"{backend.url}/together")
    assert (status, body) == (200, b"final")
    assert headers == {b"content-length": b"5", b"x-final": b"yes"}, "no interim header leaks"
    assert await exchange(pool, "GET", f"{backend.url}/next") == (
        200,
        {b"content-length": b"4"},
        b"next",
    )
    assert [s.connection for s in backend.seen] == [1, 1], "the exchange ended cleanly"
    await pool.close()


async def test_interim_response_arriving_alone_is_not_the_answer(raw, monkeypatch):
    received: list[bytes] = []
    deliver = pool_module._Connection.data_received

    def spy(self, data: bytes) -> None:
        received.append(data)
        deliver(self, data)

    monkeypatch.setattr(pool_module._Connection, "data_received", spy)

    async def answer(seen: Seen) -> AsyncIterator[bytes]:
        yield b"HTTP/1.1 100 Continue\r\n\r\n"
        # The final answer only once the pool has had the interim one on its own.
        await until(lambda: received, "the pool to receive the 100 Continue")
        yield ok(b"final")

    backend = await raw(answer)
    pool = RawUpstream(idle_limit=PATIENT)
    assert await exchange(pool, "POST", f"{backend.url}/") == (
        200,
        {b"content-length": b"5"},
        b"final",
    )
    assert received[0] == b"HTTP/1.1 100 Continue\r\n\r\n"
    await pool.close()


async def test_expect_is_not_forwarded(raw):
    backend = await raw(lambda seen: ok())
    pool = RawUpstream(idle_limit=PATIENT)
    await exchange(pool, "POST", f"{backend.url}/", [*HOST, (b"expect", b"100-continue")])
    assert "expect" not in backend.seen[0].headers
    await pool.close()


@pytest.mark.parametrize(
    ("status_line", "extra", "reused"),
    [
        (b"204 No Content", b"", True),
        (b"204 No Content", b"content-length: 0\r\n", True),
        (b"204 No Content", b"content-length: 5\r\n", False),
        (b"304 Not Modified", b"", True),
        (b"304 Not Modified", b"content-length: 10\r\n", False),
        (b"304 Not Modified", b"transfer-encoding: chunked\r\n", False),
    ],
)
async def test_no_content_and_not_modified_have_no_body(raw, status_line, extra, reused):
    # Where a body is announced the backend also sends one: it must not be taken for anything.
    sneaked = b"" if reused else b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nevil!"

    def answer(seen: Seen) -> bytes:
        if seen.path == "/next":
            return ok(b"next")
        return b"HTTP/1.1 " + status_line + b"\r\n" + extra + b"\r\n" + sneaked

    backend = await raw(answer)
    pool = RawUpstream(idle_limit=PATIENT)
    status, _, body = await exchange(pool, "GET", f"{backend.url}/")
    assert (status, body) == (int(status_line[:3]), b"")
    assert await exchange(pool, "GET", f"{backend.url}/next") == (
        200,
        {b"content-length": b"4"},
        b"next",
    )
    assert (backend.seen[1].connection == 1) is reused
    await pool.close()


@pytest.mark.parametrize("extra", [b"", b"upgrade: websocket\r\nconnection: upgrade\r\n"])
async def test_switching_protocols_is_a_broken_exchange(raw, extra):
    backend = await raw(
        lambda seen: b"HTTP/1.1 101 Switching Protocols\r\n" + extra + b"\r\n\x81\x05hello"
    )
    pool = RawUpstream(idle_limit=PATIENT)
    with pytest.raises(UpstreamError, match="switched protocols"):
        await exchange(pool, "GET", f"{backend.url}/")
    await until(lambda: backend.open == 0, "the backend to see the connection closed")
    assert len(backend.seen) == 1, "not sent again"
    await pool.close()


async def test_interim_response_with_a_body_is_a_broken_exchange(raw):
    backend = await raw(lambda seen: b"HTTP/1.1 199 Odd\r\ncontent-length: 2\r\n\r\nab" + ok())
    pool = RawUpstream(idle_limit=PATIENT)
    with pytest.raises(UpstreamError, match="interim 199 with a body"):
        await exchange(pool, "GET", f"{backend.url}/")
    await pool.close()


@pytest.mark.parametrize(
    "second", [ok(b"evil", b"x-evil: 1\r\n"), b"HTTP/1.1 204 No Content\r\n\r\n"]
)
async def test_a_second_response_to_one_request_reaches_nobody(raw, second):
    def answer(seen: Seen) -> bytes:
        return ok(b"ok") + second if seen.path == "/first" else ok(b"good")

    backend = await raw(answer)
    pool = RawUpstream(idle_limit=PATIENT)
    assert await exchange(pool, "GET", f"{backend.url}/first") == (
        200,
        {b"content-length": b"2"},
        b"ok",
    )
    assert (await exchange(pool, "GET", f"{backend.url}/second"))[2] == b"good"
    assert [s.connection for s in backend.seen] == [1, 2]
    await pool.close()


async def test_idle_connections_are_reaped_without_further_use(raw):
    backend = await raw(lambda seen: ok())
    pool = RawUpstream(idle_limit=0.2)
    await asyncio.gather(*(exchange(pool, "GET", f"{backend.url}/") for _ in range(3)))
    assert backend.accepted >= 1
    # The pool is never used again: only its own timer can close them.
    await until(lambda: backend.open == 0, "the idle connections to be closed by the pool")
    host_pool = next(iter(pool._pools.values()))
    assert not host_pool.idle
    await until(lambda: host_pool.sweep is None, "the sweep to stop with nothing idle")
    # Still usable afterwards, and a fresh idle connection is swept again.
    before = backend.accepted
    await exchange(pool, "GET", f"{backend.url}/")
    assert backend.accepted == before + 1
    await until(lambda: backend.open == 0, "the new idle connection to be closed too")
    await pool.close()


async def test_idle_connections_are_capped_after_a_burst(raw):
    burst, cap = 20, 4
    everyone_in = asyncio.Event()

    async def answer(seen: Seen) -> bytes:
        # Hold every answer until all requests are in: the burst really needs `burst` sockets.
        if len(backend.seen) >= burst:
            everyone_in.set()
        await everyone_in.wait()
        return ok()

    backend = await raw(answer)
    pool = RawUpstream(idle_limit=PATIENT, max_idle=cap)
    results = await asyncio.gather(
        *(exchange(pool, "GET", f"{backend.url}/") for _ in range(burst))
    )
    assert all(status == 200 for status, _, _ in results)
    assert backend.accepted == burst
    await until(lambda: backend.open == cap, f"the surplus over {cap} idle connections to close")
    assert len(next(iter(pool._pools.values())).idle) == cap
    await pool.close()
    await until(lambda: backend.open == 0, "close() to close the idle connections")


async def test_close_stops_the_sweep(raw):
    backend = await raw(lambda seen: ok())
    pool = RawUpstream(idle_limit=PATIENT)
    await exchange(pool, "GET", f"{backend.url}/")
    host_pool = next(iter(pool._pools.values()))
    sweep = host_pool.sweep
    assert sweep is not None
    await pool.close()
    assert sweep.cancelled()
    assert host_pool.sweep is None
    await until(lambda: backend.open == 0, "close() to close the idle connection")


def test_idle_cap_default():
    assert RawUpstream().max_idle == MAX_IDLE == 256
