"""A lean keep-alive HTTP/1.1 connection pool on asyncio protocols and httptools' parser.

Measured against aiohttp as the proxy's upstream client (benchmarks/), it is the largest single
win on the hot path: no per-request client objects, no header re-encoding, bytes in and out.
It speaks only what the proxy needs: HTTP/1.1 to a known backend, in the clear or over TLS,
requests with a length or chunked bodies, streamed responses, connection reuse, and one retry
when a pooled connection turns out to be closed before the request was written.

Framing rules the parser cannot know by itself: a response to HEAD has no body whatever it
announces, interim 1xx responses are skipped until the final one, 204 and 304 have no body. A
connection whose framing is uncertain afterwards is closed rather than reused. Idle connections
are capped per backend and reaped by one timer per backend while any are idle.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import NoReturn, cast
from urllib.parse import urlsplit

import httptools

from ..asgi import Headers
from ..controlplane.egress import EgressRules
from ..controlplane.egress_resolver import checked_address
from ..controlplane.snapshot import TargetTls
from .deadlines import HeadDeadlines
from .request_head import request_head
from .upstream import UpstreamError, UpstreamTlsError

IDLE_LIMIT = 4.0  # uvicorn closes idle keep-alive connections after 5 s
# Idle connections kept per backend. A burst of N concurrent requests opens N connections; all
# of them idle would hold N file descriptors here and N on the backend. 256 keeps the sustained
# concurrency the benchmarks reach warm and still bounds what one spike can leave behind.
MAX_IDLE = 256
HIGH_WATER = 1 << 20


def _announces_body(headers: Headers) -> bool:
    """Whether the headers frame a body (Transfer-Encoding, or a non-zero Content-Length)."""
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"transfer-encoding" or (
            lowered == b"content-length" and value.strip() != b"0"
        ):
            return True
    return False


class _Response:
    __slots__ = ("_chunks", "_conn", "_done", "_error", "_waiter", "head", "headers", "status")

    def __init__(self, conn: _Connection, head: bool = False):
        self._conn = conn
        self.head = head  # the request was HEAD: the response has no body
        self.status = 0
        self.headers: Headers = []
        self._chunks: deque[bytes] = deque()
        self._done = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._wake()

    def finish(self, error: Exception | None = None) -> None:
        self._done = True
        self._error = error
        self._wake()

    def complete_body(self) -> bytes | None:
        """The whole body if the message is already complete (and intact)."""
        if not self._done or self._error is not None:
            return None
        body = b"".join(self._chunks)
        self._chunks.clear()
        self._conn.consumed(len(body))
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; reading is paused while too much is buffered."""
        conn = self._conn
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                conn.consumed(len(chunk))
                yield chunk
            if self._done:
                if self._error is not None:
                    raise UpstreamError(f"backend broke the response body: {self._error}")
                return
            loop = conn.pool.loop
            assert loop is not None  # set when the connection was made
            self._waiter = loop.create_future()
            await self._waiter
            self._waiter = None

    def release(self) -> None:
        """Back to the pool if the exchange completed cleanly, else close the connection."""
        self._conn.release(clean=self._done and self._error is None)


class _Connection(asyncio.Protocol):
    def __init__(self, pool: _HostPool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: _Response | None = None
        # Where header callbacks go: the current response's list until its final headers are
        # complete, then None (no per-message callback needed to catch a second response).
        self._headers: Headers | None = None
        self.headers_ready: asyncio.Future[None] | None = None
        self.closed = False
        self.keep_alive = True
        # Whether the parser reached the end of the last response (so it can read the next).
        self.parsed_whole = False
        self.idle_since = time.monotonic()
        self._buffered = 0
        self._paused = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # loop.create_connection gives a stream transport (uvloop's do not subclass
        # asyncio.Transport, so this cannot be an isinstance check).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.response is None:
            # Bytes while no request is out: the backend's framing cannot be trusted any more.
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("the backend switched protocols without being asked"))
            self.close()
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a callback below raised, if it was one of ours
            self._fail(
                cause
                if isinstance(cause, UpstreamError)
                else UpstreamError(f"invalid response from the backend: {exc}")
            )
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(UpstreamError(f"the backend closed the connection ({exc or 'EOF'})"))

    # httptools callbacks (an UpstreamError raised here ends the exchange as broken)

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._headers
        if headers is None:
            self._second_response()
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None or self._headers is None:
            self._second_response()
        self._headers = None  # the final response's headers are complete
        status = self.parser.get_status_code()
        response.status = status
        self.keep_alive = self.parser.should_keep_alive()
        special = status < 200 or status == 204 or status == 304 or response.head
        if special and not self._bodiless_headers(response, status):
            return  # an interim response: the final one is still to come
        if self.headers_ready is not None and not self.headers_ready.done():
            self.headers_ready.set_result(None)

    def _bodiless_headers(self, response: _Response, status: int) -> bool:
        """Headers of a response without a body; False for an interim one to skip."""
        announced = _announces_body(response.headers)
        if status < 200:
            if status == 101:
                # Never asked for (no Upgrade is forwarded): the bytes after it are not HTTP.
                self.keep_alive = False
                raise UpstreamError("the backend switched protocols without being asked")
            if announced:
                self.keep_alive = False
                raise UpstreamError(f"the backend sent an interim {status} with a body")
            # 100 Continue, 103 Early Hints: not the answer. Its status stays until the final
            # one so that a failure from here on is never taken for an unsent request.
            response.headers = self._headers = []
            return False
        if announced:
            # A body was announced and must not be read; whether the backend sends it anyway
            # is unknowable, so the connection is not reused.
            self.keep_alive = False
        # The parser would wait for a body after HEAD: the message ends with its headers.
        response.finish()
        return True

    def _second_response(self) -> NoReturn:
        # Headers after the response's own: whatever they begin answers nobody.
        self.keep_alive = False
        raise UpstreamError("the backend sent more than one response")

    def on_body(self, body: bytes) -> None:
        response = self.response
        if response is None or response._done:
            return  # after HEAD: bytes that must not be relayed (the connection is not reused)
        response.feed(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        response = self.response
        if response is not None and response.status >= 200:
            # The parser read the final response to its end: it is ready for the next one.
            self.parsed_whole = True
            if not response._done:
                response.finish()

    # pool bookkeeping

    def consumed(self, size: int) -> None:
        self._buffered -= size
        if self._paused and self._buffered < HIGH_WATER // 4 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def _fail(self, error: Exception) -> None:
        if self.headers_ready is not None and not self.headers_ready.done():
            self.headers_ready.set_exception(error)
        if self.response is not None and not self.response._done:
            self.response.finish(error)

    def release(self, clean: bool) -> None:
        self.response = None
        self.headers_ready = None
        pool = self.pool
        if clean and self.keep_alive and not self.closed and len(pool.idle) < pool.max_idle:
            if not self.parsed_whole:
                # Stopped inside a message (a HEAD's announced body): a fresh parser.
                self.parser = httptools.HttpResponseParser(self)
            self.parsed_whole = False
            self.idle_since = time.monotonic()
            pool.idle.append(self)
            if pool.sweep is None:
                pool.schedule_sweep(pool.idle_limit)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _HostPool:
    def __init__(
        self,
        host: str,
        port: int,
        idle_limit: float = IDLE_LIMIT,
        max_idle: int = MAX_IDLE,
        egress: EgressRules | None = None,
        tls: TargetTls | None = None,
    ):
        self.host = host
        self.port = port
        self.egress = egress
        self.tls = tls
        self.idle_limit = idle_limit
        self.max_idle = max_idle
        # A stack: taken and returned at the right end, so the oldest are at the left.
        self.idle: deque[_Connection] = deque()
        self.sweep: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def take_idle(self) -> _Connection | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if (
                conn.closed
                or conn.transport is None
                or conn.transport.is_closing()
                or now - conn.idle_since > self.idle_limit
            ):
                conn.close()
                continue
            return conn
        return None

    def schedule_sweep(self, delay: float) -> None:
        """One timer per backend while connections are idle (not one per request)."""
        if self.loop is not None:
            self.sweep = self.loop.call_later(delay, self._sweep)

    def _sweep(self) -> None:
        self.sweep = None
        idle = self.idle
        expired_before = time.monotonic() - self.idle_limit
        while idle and (idle[0].idle_since <= expired_before or idle[0].closed):
            idle.popleft().close()
        if idle:
            # Timers may fire a little early; never spin on the same connection.
            self.schedule_sweep(max(idle[0].idle_since - expired_before, 0.01))

    def close(self) -> None:
        """Close the idle connections, stop the sweep and keep nothing released later."""
        if self.sweep is not None:
            self.sweep.cancel()
            self.sweep = None
        self.max_idle = 0
        while self.idle:
            self.idle.pop().close()

    async def connect(self) -> _Connection:
        loop = self.loop = asyncio.get_running_loop()
        tls = self.tls
        try:
            # In a cluster, to an address the egress rules allow, looked up once per connection.
            host = self.host
            if self.egress is not None:
                host = await checked_address(self.egress, self.host, self.port)
            # Over TLS the certificate is checked against the target's name, not the address.
            _, conn = await loop.create_connection(
                lambda: _Connection(self),
                host,
                self.port,
                ssl=None if tls is None else tls.context,
                server_hostname=None if tls is None else tls.server_name,
            )
        except ssl.SSLError as exc:
            raise UpstreamTlsError.of(f"{self.host}:{self.port}", exc) from exc
        except OSError as exc:
            raise UpstreamError(
                f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        return conn


class RawUpstream:
    """The `Upstream` for the hot path: pooled keep-alive connections per backend."""

    def __init__(
        self,
        idle_limit: float = IDLE_LIMIT,
        max_idle: int = MAX_IDLE,
        egress: EgressRules | None = None,
    ) -> None:
        self.idle_limit = idle_limit
        self.max_idle = max_idle
        self.egress = egress
        # Keyed by the TLS settings too: a connection verified against one target's CAs and
        # name is never handed to a target that trusts others.
        self._pools: dict[tuple[str, int, TargetTls | None], _HostPool] = {}
        self._targets: dict[tuple[str, TargetTls | None], tuple[_HostPool, bytes]] = {}
        self._deadlines: HeadDeadlines | None = None

    def _resolve(self, url: str, tls: TargetTls | None) -> tuple[_HostPool, bytes]:
        cached = self._targets.get((url, tls))
        if cached is not None:
            return cached
        parts = urlsplit(url)
        if (parts.scheme == "https") != (tls is not None):
            # Never https in the clear, nor TLS settings silently unused.
            raise UpstreamError(f"{parts.scheme}:// {'without' if tls is None else 'with'} TLS")
        host, port = parts.hostname or "127.0.0.1", parts.port or (80 if tls is None else 443)
        pool = self._pools.get((host, port, tls))
        if pool is None:
            pool = self._pools[(host, port, tls)] = _HostPool(
                host, port, self.idle_limit, self.max_idle, self.egress, tls
            )
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        resolved = (pool, target.encode("latin-1"))
        if len(self._targets) < 4096:  # query strings vary; keep the cache bounded
            self._targets[(url, tls)] = resolved
        return resolved

    async def request(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes],
        headers_within: float,
        tls: TargetTls | None = None,
    ) -> _Response:
        """Send the request; return once the response headers are in (TimeoutError after
        `headers_within` seconds: one deadline, cheaper than a timeout context)."""
        pool, target = self._resolve(url, tls)
        streamed = not isinstance(body, bytes)
        head = request_head(method, target, headers, len(body) if isinstance(body, bytes) else None)
        no_body = method == "HEAD"
        for attempt in (1, 2):
            conn = pool.take_idle()
            reused = conn is not None
            if conn is None:
                conn = await pool.connect()
            # The loop the pool's connections were made on (set by connect): asking asyncio for
            # the running loop costs a getpid system call per request on Python 3.11.
            loop = pool.loop
            assert loop is not None
            response = _Response(conn, no_body)
            conn.response = response
            conn._headers = response.headers
            ready = conn.headers_ready = loop.create_future()
            transport = conn.transport
            assert transport is not None
            if transport.is_closing():
                conn.close()
                if reused and attempt == 1:
                    continue
                raise UpstreamError("the backend connection closed before the request")
            await self._write(conn, head, body, ready)
            # The wait for the head starts once the request is out; any failure (timeout,
            # broken connection, cancellation) closes the connection.
            deadlines = self._deadlines
            if deadlines is None or deadlines.loop is not loop:
                deadlines = self._deadlines = HeadDeadlines(loop)
            deadlines.add(ready, headers_within)
            try:
                await ready
            except BaseException as exc:
                conn.close()
                if not isinstance(exc, UpstreamError):
                    raise
                # A pooled connection the backend had just closed: resend once, fresh.
                if reused and attempt == 1 and not streamed and response.status == 0:
                    continue
                raise
            finally:
                deadlines.discard(ready)
            return response
        raise UpstreamError("the backend closed the connection twice")

    @classmethod
    async def _write(
        cls,
        conn: _Connection,
        head: bytes,
        body: bytes | AsyncIterator[bytes],
        ready: asyncio.Future[None],
    ) -> None:
        transport = conn.transport
        assert transport is not None
        if isinstance(body, bytes):
            transport.write(head + body if body else head)
            return
        transport.write(head)
        try:
            await cls._write_chunked(conn, body)
        except BaseException:
            # The body source failed (client gone, too large): the exchange is dead.
            conn.close()
            ready.cancel()
            raise

    @staticmethod
    async def _write_chunked(conn: _Connection, body: AsyncIterator[bytes]) -> None:
        transport = conn.transport
        assert transport is not None
        async for chunk in body:
            if chunk:
                transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        transport.write(b"0\r\n\r\n")

    async def close(self) -> None:
        """Close every pooled connection and stop the sweeps."""
        for pool in self._pools.values():
            pool.close()
