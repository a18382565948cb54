"""One request on a client connection and its response: the ASGI `receive` and `send` the app
is called with, as uvicorn's request cycle has them, with less work per request.

What uvicorn's cycle does generically and this one does not: an `asyncio.Event` per request
(receive waits on a future, made only when there is nothing to hand over yet), a regular
expression per response header (response_head.py checks the whole head at once) and a write
for the head and another for the body (the head waits for the first body message, or at most
for the loop's next turn, and leaves with it in one write)."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl

from .asgi import Message
from .response_head import CHUNKED, NO_BODY, SIZED, chunk, response_head

log = logging.getLogger("uvicorn.error")

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_DISCONNECT = "http.disconnect"
_SERVER_ERROR: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"21"),
    (b"connection", b"close"),
]

METHODS = {m.encode(): m for m in ("GET", "POST", "DELETE", "HEAD", "OPTIONS", "PUT", "PATCH")}


def request_target(url: bytes) -> tuple[str, bytes, bytes]:
    """A request target's decoded path, raw path and query, as uvicorn reads them (httptools'
    URL parser; HttpParserInvalidURLError for a target it refuses)."""
    parsed = httptools.parse_url(url)
    raw_path: bytes = parsed.path
    path = raw_path.decode("ascii")
    if "%" in path:
        path = urllib.parse.unquote(path)
    return path, raw_path, parsed.query or b""


def _nothing() -> None:
    """What a finished cycle calls instead of telling its connection."""


class RequestCycle:
    """A request's body as it arrives and its response as the app sends it."""

    __slots__ = (
        "_chunks",
        "_defaults",
        "_delivered",
        "_head_request",
        "_http11",
        "_left",
        "_loop",
        "_mode",
        "_pending",
        "_size",
        "_waiter",
        "disconnected",
        "flow",
        "keep_alive",
        "more_body",
        "on_response",
        "response_complete",
        "response_started",
        "scope",
        "transport",
        "waiting_for_100_continue",
    )

    def __init__(
        self,
        scope: dict[str, Any],
        transport: asyncio.Transport,
        flow: FlowControl,
        loop: asyncio.AbstractEventLoop,
        defaults: bytes,
        keep_alive: bool,
        expect_100_continue: bool,
        on_response: Callable[[], None],
    ) -> None:
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.on_response = on_response
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.disconnected = False
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self._loop = loop
        self._defaults = defaults
        self._head_request = scope["method"] == "HEAD"
        self._http11 = scope["http_version"] == "1.1"
        self._chunks: list[bytes] = []
        self._size = 0
        self._delivered = False  # the last http.request message was handed over
        self._waiter: asyncio.Future[None] | None = None
        self._pending: bytes | None = None
        self._mode = NO_BODY
        self._left = 0

    # The connection's side: the request body as the parser reads it.

    def wake(self) -> None:
        """Something `receive` waits for happened (a body part, its end, a disconnect)."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def body_received(self, body: bytes) -> None:
        """A part of the request body; reading stops while too much waits for the app."""
        self._chunks.append(body)
        self._size += len(body)
        if self._size > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        self.wake()

    # The app's side.

    async def run_asgi(self, app: Any) -> None:
        """Run the app for this request; answer 500 (or close) when it fails or answers
        nothing, as uvicorn does."""
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            log.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self._send_500()
            else:
                self.transport.close()
        else:
            if result is not None:
                log.error("ASGI callable should return None, but returned '%s'.", result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                log.error("ASGI callable returned without starting response.")
                await self._send_500()
            elif not self.response_complete and not self.disconnected:
                log.error("ASGI callable returned without completing response.")
                self.transport.close()
        finally:
            self.on_response = _nothing

    async def _send_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500, "headers": _SERVER_ERROR})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})

    async def receive(self) -> Message:
        """The next part of the request body; `http.disconnect` once the client is gone or
        the response is complete (after the body's end, it waits for that)."""
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(CONTINUE)
            self.waiting_for_100_continue = False
        while not (self.disconnected or self.response_complete):
            if self._chunks or not (self.more_body or self._delivered):
                return self._request_message()
            flow = self.flow
            if flow.read_paused:
                flow.resume_reading()
            waiter = self._waiter = self._loop.create_future()
            await waiter
        return {"type": _DISCONNECT}

    def _request_message(self) -> Message:
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._size = 0
        more = self.more_body
        if not more:
            self._delivered = True
        elif self.flow.read_paused:
            self.flow.resume_reading()
        return {"type": "http.request", "body": body, "more_body": more}

    async def send(self, message: Message) -> None:
        """Write the response: its head (response_head.py), then its body framed as the head
        says; a message out of order raises RuntimeError, as in uvicorn."""
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            head, self._mode, self._left, self.keep_alive = response_head(
                message["status"],
                message.get("headers", ()),
                self._defaults,
                self._head_request,
                self._http11,
                self.keep_alive,
            )
            self.response_started = True
            self.waiting_for_100_continue = False
            # Kept for the first body message (usually sent in this same turn of the loop).
            self._pending = head
            self._loop.call_soon(self._flush)
            return
        if self.response_complete:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already "
                "completed."
            )
        if message["type"] != "http.response.body":
            raise RuntimeError(
                f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
            )
        self._write_body(message.get("body", b""), message.get("more_body", False))

    def _write_body(self, body: bytes, more: bool) -> None:
        mode = self._mode
        if mode == SIZED:
            left = self._left - len(body)
            if left < 0:
                raise RuntimeError("Response content longer than Content-Length")
            if not more and left:
                raise RuntimeError("Response content shorter than Content-Length")
            self._left = left
            data = body
        elif mode == CHUNKED:
            data = chunk(body, not more)
        elif mode == NO_BODY:
            data = b""
        else:  # UNTIL_CLOSE
            data = body
        pending = self._pending
        if pending is not None:
            self._pending = None
            data = pending + data
        if data:
            self.transport.write(data)
        if not more:
            self.response_complete = True
            self.wake()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    def _flush(self) -> None:
        """Write a head no body message followed in its turn of the loop (a stream's)."""
        pending = self._pending
        if pending is not None:
            self._pending = None
            if not self.transport.is_closing():
                self.transport.write(pending)
