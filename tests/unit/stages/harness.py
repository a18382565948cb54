"""A tiny in-process ASGI harness: one request through one stage, no server, no sockets.

`drive` plays the server: it builds the scope, feeds the body (whole or in chunks), collects
what the app sends, and, once the body is used up, answers `receive()` with `http.disconnect`
only after the response is complete (or when the test says the client left), as uvicorn does.
`Inner` plays the rest of the pipeline: it records what reached it and answers as configured.
`MemoryUpstream` plays the backend connection pool behind the reverse proxy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE

from mcp_oauth_gateway.asgi import ASGIApp, Headers, Message, Receive, Scope, Send
from mcp_oauth_gateway.controlplane.snapshot import TargetTls
from mcp_oauth_gateway.proxy.upstream import UpstreamError

HOST = b"gw.test"
CLIENT = ("203.0.113.7", 50123)
# A stage that hangs fails its test after this long instead of holding up the suite.
GUARD_SECONDS = 5.0


def values(headers: Headers, name: bytes) -> list[bytes]:
    """Every value of `name` in `headers`, in order."""
    return [v for k, v in headers if k == name]


@dataclass
class Response:
    """What the app sent for one request."""

    status: int
    headers: Headers
    body: bytes
    messages: list[Message]
    reached: bool  # whether the `inner` given to `drive` was called (False if none)

    def header(self, name: bytes) -> bytes | None:
        """The only value of a response header, or None (two values fail the test)."""
        found = values(self.headers, name)
        assert len(found) <= 1, f"{name!r} sent {len(found)} times: {found}"
        return found[0] if found else None

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def chunks(self) -> list[bytes]:
        """The body of each `http.response.body` message, as sent."""
        return [m.get("body", b"") for m in self.messages if m["type"] == "http.response.body"]


def _scope(
    method: str,
    path: str,
    query: bytes,
    headers: Sequence[tuple[bytes, bytes]],
    host: bytes | None,
    scope: dict[str, Any] | None,
) -> Scope:
    """The request's HTTP scope as uvicorn builds it, `scope` laid over it."""
    request_headers: Headers = ([(b"host", host)] if host is not None else []) + list(headers)
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": request_headers,
        "client": CLIENT,
        "server": ("gw.test", 80),
        **(scope or {}),
    }


def _request_messages(body: bytes | Sequence[bytes]) -> list[Message]:
    """The body as `http.request` messages (`more_body` on all but the last)."""
    chunks = [body] if isinstance(body, bytes) else list(body) or [b""]
    return [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]


class _Connection:
    """The server's side of one request: hands out the request's messages, then
    `http.disconnect` once the response is complete or the client left; records what the app
    sent, checked as uvicorn checks it."""

    def __init__(self, pending: list[Message], left: asyncio.Event):
        self.pending = pending
        self.left = left
        self.complete = asyncio.Event()
        self.messages: list[Message] = []

    async def receive(self) -> Message:
        if self.pending:
            return self.pending.pop(0)
        # Nothing more to read: like a server, wait until the response ends or the client goes.
        waits = [
            asyncio.ensure_future(self.complete.wait()),
            asyncio.ensure_future(self.left.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        assert not self.complete.is_set(), f"sent after the response ended: {message}"
        if message["type"] == "http.response.start":
            assert not self.messages, "http.response.start sent twice or after the body"
            for name, value in message.get("headers", ()):
                # uvicorn refuses these (the client would get a 500 instead).
                assert not HEADER_RE.search(name), f"response header name {name!r}"
                assert not HEADER_VALUE_RE.search(value), f"response header {name!r}: {value!r}"
        else:
            assert self.messages, "body sent before http.response.start"
        self.messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete.set()


async def drive(
    app: ASGIApp,
    method: str = "GET",
    path: str = "/mcp",
    *,
    query: bytes = b"",
    headers: Sequence[tuple[bytes, bytes]] = (),
    body: bytes | Sequence[bytes] = b"",
    host: bytes | None = HOST,
    scope: dict[str, Any] | None = None,
    inner: Inner | None = None,
    client_left: asyncio.Event | None = None,
    disconnect_first: bool = False,
) -> Response:
    """Send one request through `app` and collect the response.

    `body` as a sequence is sent chunk by chunk (`more_body` on all but the last). `scope` adds
    or overrides scope keys (claims under CLAIMS_KEY, TRUST_FORWARDED_KEY…). Setting
    `client_left` makes a pending `receive()` return `http.disconnect`; `disconnect_first` makes
    the very first one do so (the client went away before sending its body)."""
    full = _scope(method, path, query, headers, host, scope)
    left = client_left or asyncio.Event()
    if disconnect_first:
        left.set()
    connection = _Connection([] if disconnect_first else _request_messages(body), left)
    calls_before = len(inner.seen) if inner is not None else 0
    async with asyncio.timeout(GUARD_SECONDS):
        await app(full, connection.receive, connection.send)
    messages = connection.messages
    start = messages[0] if messages else {"status": 0, "headers": []}
    return Response(
        status=start["status"],
        headers=list(start.get("headers", [])),
        body=b"".join(m.get("body", b"") for m in messages[1:]),
        messages=messages,
        reached=inner is not None and len(inner.seen) > calls_before,
    )


@dataclass
class Seen:
    """One request as it reached the inner app."""

    scope: dict[str, Any]
    headers: Headers
    body: bytes
    body_messages: int  # how many `http.request` messages carried it

    def header(self, name: bytes) -> bytes | None:
        found = values(self.headers, name)
        return found[0] if found else None


@dataclass
class Inner:
    """The rest of the pipeline: records each request, then answers `status`, `headers` and
    `body` (a sequence is sent chunk by chunk, each with `more_body`, then an empty last one,
    the way a streaming server ends a response)."""

    status: int = 200
    headers: Headers = field(default_factory=lambda: [(b"content-type", b"application/json")])
    body: bytes | Sequence[bytes] = b'{"ok": true}'
    read_body: bool = True
    seen: list[Seen] = field(default_factory=list)

    @classmethod
    def sse(
        cls, events: Sequence[bytes], status: int = 200, headers: Headers | None = None
    ) -> Inner:
        """An SSE stream: one chunk per event."""
        return cls(status, [(b"content-type", b"text/event-stream"), *(headers or [])], events)

    @property
    def last(self) -> Seen:
        assert self.seen, "the inner app was never reached"
        return self.seen[-1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, count = b"", 0
        while self.read_body:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            count += 1
            if not message.get("more_body", False):
                break
        self.seen.append(Seen(dict(scope), list(scope["headers"]), body, count))
        await send(
            {"type": "http.response.start", "status": self.status, "headers": list(self.headers)}
        )
        if isinstance(self.body, bytes):
            await send({"type": "http.response.body", "body": self.body})
            return
        for chunk in self.body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


# --- the backend connection pool, in memory --------------------------------------------------


@dataclass
class Sent:
    """One request as the reverse proxy handed it to the upstream."""

    method: str
    url: str
    headers: Headers
    body: bytes
    streamed: bool  # the body came as an async iterator rather than bytes
    headers_within: float
    tls: TargetTls | None = None

    def header(self, name: bytes) -> bytes | None:
        found = values(self.headers, name)
        assert len(found) <= 1, f"{name!r} forwarded {len(found)} times: {found}"
        return found[0] if found else None


@dataclass
class MemoryResponse:
    """An `UpstreamResponse`: `body` arrives whole (`complete_body`), `chunks` one by one;
    `fail_after` breaks the stream with UpstreamError after that many chunks; `hold` keeps it
    open after the chunks until the proxy stops reading, `after_stream` is set once every chunk
    was handed out (a test sets its `client_left` event this way)."""

    status: int = 200
    headers: Headers = field(default_factory=lambda: [(b"content-type", b"application/json")])
    body: bytes | None = b'{"ok": true}'
    stream: Sequence[bytes] = ()
    fail_after: int | None = None
    hold: bool = False
    after_stream: asyncio.Event | None = None
    released: int = 0
    read: list[bytes] = field(default_factory=list)
    closed: bool = False

    def complete_body(self) -> bytes | None:
        return self.body

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            for i, chunk in enumerate(self.stream):
                if self.fail_after is not None and i == self.fail_after:
                    raise UpstreamError("the backend closed the connection mid-body")
                self.read.append(chunk)
                yield chunk
            if self.after_stream is not None:
                self.after_stream.set()
            if self.hold:
                await asyncio.Event().wait()  # a stream that never ends by itself
        finally:
            self.closed = True

    def release(self) -> None:
        self.released += 1


@dataclass
class MemoryUpstream:
    """An `Upstream` in memory: answers `response`, or raises `error`, and records each request
    (reading a streamed body whole, as the pool would while sending it)."""

    response: MemoryResponse = field(default_factory=MemoryResponse)
    error: BaseException | None = None
    sent: list[Sent] = field(default_factory=list)

    async def request(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes],
        headers_within: float,
        tls: TargetTls | None = None,
    ) -> MemoryResponse:
        streamed = not isinstance(body, bytes)
        data = body if isinstance(body, bytes) else b"".join([c async for c in body])
        self.sent.append(Sent(method, url, list(headers), data, streamed, headers_within, tls))
        if self.error is not None:
            raise self.error
        return self.response

    async def close(self) -> None:
        """Nothing to close."""

    @property
    def last(self) -> Sent:
        assert self.sent, "nothing reached the upstream"
        return self.sent[-1]


def count_calls(monkeypatch: Any, module: object, name: str) -> list[int]:
    """Count the calls to `module.name` (a CEL evaluation, say); the count is `[n]`."""
    made = [0]
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return made
