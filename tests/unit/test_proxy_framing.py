"""The reverse proxy stage served by a real uvicorn (httptools, as the gateway serves) in front of
a scripted raw backend: responses without a body reach the client whole and promptly, and no
header the server writes itself arrives twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest
import uvicorn
from fault_backend import RawBackend, Seen

from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget
from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.proxy.reverse_proxy import (
    ReverseProxy,
    dropped_request_headers,
    upstream_request_headers,
)
from support import free_port

OLD_DATE = b"Thu, 01 Jan 1970 00:00:00 GMT"


@dataclass
class Served:
    url: str
    errors: list[BaseException] = field(default_factory=list)


@asynccontextmanager
async def proxy_to(answer) -> AsyncIterator[tuple[Served, RawBackend]]:
    """A ReverseProxy to a RawBackend answering with `answer`, served by uvicorn on loopback."""
    backend = await RawBackend(answer).start()
    port = int(backend.url.rsplit(":", 1)[1])
    upstream = RawUpstream()
    proxy = ReverseProxy(CompiledTarget("127.0.0.1", port, "/mcp"), upstream, 10, False)
    listen = free_port()
    served = Served(f"http://127.0.0.1:{listen}/mcp")

    async def app(scope, receive, send):
        # What uvicorn would only log (and answer by dropping the connection) fails the test.
        try:
            await proxy(scope, receive, send)
        except BaseException as exc:
            served.errors.append(exc)
            raise

    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=listen,
            http="httptools",
            lifespan="off",
            log_level="critical",
            server_header=False,
            # A proxy stuck on a body that never comes must not hold the test up at shutdown.
            timeout_graceful_shutdown=1,
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
        yield served, backend
    finally:
        server.should_exit = True
        await task
        await upstream.close()
        await backend.stop()


def answer_with(first: bytes):
    """`first` for the first request, then a plain 200 carrying the backend's own Date."""
    answered: list[Seen] = []

    def answer(seen: Seen) -> bytes:
        answered.append(seen)
        if len(answered) == 1:
            return first
        return b"HTTP/1.1 200 OK\r\ndate: " + OLD_DATE + b"\r\ncontent-length: 4\r\n\r\nnext"

    return answer


@pytest.mark.parametrize(
    ("status", "extra"),
    [
        (204, b""),
        (204, b"content-length: 5\r\n"),
        (304, b""),
        (304, b"content-length: 10\r\n"),
        (304, b"transfer-encoding: chunked\r\n"),
    ],
)
async def test_bodiless_responses_reach_the_client_whole(status, extra):
    reason = b"No Content" if status == 204 else b"Not Modified"
    first = b'HTTP/1.1 %d %s\r\ndate: %s\r\netag: "v1"\r\n%s\r\n' % (
        status,
        reason,
        OLD_DATE,
        extra,
    )
    async with proxy_to(answer_with(first)) as (served, _), httpx.AsyncClient(timeout=3) as client:
        response = await client.get(served.url)
        assert response.status_code == status
        assert response.headers["etag"] == '"v1"'
        assert response.content == b""
        assert "content-length" not in response.headers
        assert "transfer-encoding" not in response.headers
        assert len(response.headers.get_list("date")) == 1
        # The same client connection carries the next exchange.
        follow = await client.get(served.url)
        assert (follow.status_code, follow.content) == (200, b"next")
    assert served.errors == []


async def test_head_relays_the_headers_and_no_body():
    first = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n"
    async with proxy_to(answer_with(first)) as (served, _), httpx.AsyncClient(timeout=3) as client:
        response = await client.head(served.url)
        assert response.status_code == 200
        assert response.headers["content-length"] == "42"
        assert len(response.headers.get_list("date")) == 1
        assert response.content == b""
        follow = await client.get(served.url)
        assert (follow.status_code, follow.content) == (200, b"next")
    assert served.errors == []


async def test_one_date_header_and_it_is_the_gateways():
    async with (
        proxy_to(
            answer_with(
                b"HTTP/1.1 200 OK\r\ndate: " + OLD_DATE + b"\r\ncontent-length: 2\r\n\r\nok"
            )
        ) as (served, _),
        httpx.AsyncClient(timeout=3) as client,
    ):
        for _ in range(2):
            response = await client.get(served.url)
            dates = response.headers.get_list("date")
            assert len(dates) == 1, dates
            assert dates[0] != OLD_DATE.decode()
    assert served.errors == []


async def test_expect_reaches_neither_the_pool_nor_the_backend():
    scope = {
        "headers": [(b"host", b"gw"), (b"expect", b"100-continue"), (b"content-length", b"2")],
        "client": ("127.0.0.1", 1),
    }
    headers = upstream_request_headers(scope, b"backend:80", False, dropped_request_headers(False))
    assert b"expect" not in {name for name, _ in headers}
    async with (
        proxy_to(answer_with(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")) as (
            served,
            backend,
        ),
        httpx.AsyncClient(timeout=3) as client,
    ):
        response = await client.post(served.url, content=b"{}", headers={"expect": "100-continue"})
        assert response.content == b"ok"
        assert "expect" not in backend.seen[0].headers
    assert served.errors == []
