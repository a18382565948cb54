"""Filtering answers that may carry list results (`tools/list` and the like) item by item, for
tool-level authorization: a JSON body as a whole, an SSE stream event by event (an event that
updates a resource the caller may not read is dropped whole).

Nothing the filter cannot read is passed on as it came: an answer is read as clients read it
(lone surrogates included), a compressed one is decoded, and what still cannot be read is
replaced by a JSON-RPC error, so a caller never sees items it may not use through a body the
gateway could not filter."""

from __future__ import annotations

from collections.abc import Callable

from ..asgi import Headers, Message, Send, send_json
from ..jsonrpc import INTERNAL_ERROR, NotJson, error, read_message, write_message
from .content_coding import CodingError, Decoder, check_codings, codings
from .mcp_messages import filter_result, hidden_update

# An answer (or one SSE event) is held whole to be filtered; beyond this it is refused.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
_DROPPED = frozenset({b"content-length", b"content-encoding"})


class ListFilter:
    """Wraps `send` for one request whose answer may hold list results. `method`: the list
    method asked for, or None when unknown (a GET stream may replay any answer)."""

    def __init__(
        self,
        allowed: Callable[[str, str], bool],
        method: str | None,
        request_id: object,
        send: Send,
    ):
        self.allowed = allowed
        self.method = method
        self.request_id = request_id
        self.downstream = send
        self.start: Message | None = None
        self.sse = False
        self.json = False
        self.decoder: Decoder | None = None
        self.broken: str | None = None  # why the rest of the answer cannot be read
        self.pending = b""

    def _error(self, why: str) -> bytes:
        return write_message(self._error_object(why))

    def _filtered(self, data: bytes, event: bool = False) -> bytes | None:
        """`data` with denied items removed (the same object when none were); NotJson. An
        `event` of a stream that is an update of a resource the caller may not read: None."""
        message = read_message(data)
        if event and hidden_update(message, self.allowed):
            return None
        if filter_result(message, self.method, self.allowed):
            return write_message(message)
        return data

    def _event(self, event: bytes) -> bytes | None:
        """The event with denied list items removed; None when it is to be dropped whole (an
        update of a resource the caller may not read)."""
        lines = event.split(b"\n")
        data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
        joined = b"\n".join(data)
        if not joined:
            # No data (an id alone, or an empty `data:`: MCP's priming event): clients dispatch
            # no message for it, so there is nothing to filter.
            return event
        try:
            filtered = self._filtered(joined, event=True)
        except NotJson as exc:
            filtered = self._error(str(exc))
        if filtered is None:
            return None
        if filtered is joined:
            return event  # nothing removed: the event passes byte for byte
        others = [line for line in lines if not line.startswith(b"data:")]
        return b"\n".join([*others, b"data: " + filtered])

    async def _send_events(self, more: bool) -> None:
        raw, held = self.pending, b""
        if more and raw.endswith(b"\r"):
            # It may be the first half of a CRLF: wait for the next chunk to tell.
            raw, held = raw[:-1], b"\r"
        # SSE lines end with CRLF, LF or a lone CR; all three must split events here exactly
        # as a client will, or an event could pass unread.
        text = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *events, rest = text.split(b"\n\n")
        out = b"".join(e + b"\n\n" for e in map(self._event, events) if e is not None)
        self.pending = rest + held
        if len(self.pending) > MAX_ANSWER_BYTES:
            self._break(f"an event is larger than {MAX_ANSWER_BYTES} bytes")
        if self.broken is not None:
            out += b"data: " + self._error(self.broken) + b"\n\n"
            self.pending = b""
        elif not more:
            # An unterminated last event: clients should drop it, but a lenient one may not.
            out, self.pending = out + (self._event(self.pending) or b""), b""
        await self.downstream({"type": "http.response.body", "body": out, "more_body": more})

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = why

    def _decoded(self, data: bytes) -> bytes:
        if self.decoder is None or self.broken is not None:
            return data
        try:
            return self.decoder.feed(data)
        except CodingError as exc:
            self._break(str(exc))
            return b""

    def _head(self, message: Message) -> None:
        headers: Headers = list(message.get("headers", ()))
        content_type = next((v for k, v in headers if k == b"content-type"), b"").lower()
        self.sse = content_type.startswith(b"text/event-stream")
        self.json = b"json" in content_type or 200 <= message["status"] < 300
        names = dict(headers)
        if b"content-encoding" in names:
            try:
                coding = check_codings(codings(headers))
            except CodingError as exc:
                self._break(str(exc))
            else:
                if coding is not None:
                    self.decoder = Decoder(coding, MAX_ANSWER_BYTES)
        # The body's length changes when items are dropped, and it leaves here decoded.
        kept = [(k, v) for k, v in headers if k not in _DROPPED]
        self.start = {**message, "headers": kept}

    async def send(self, message: Message) -> None:
        """Send `message` downstream, with denied list items removed from bodies."""
        if message["type"] == "http.response.start":
            self._head(message)
            if self.sse:
                assert self.start is not None
                await self.downstream(self.start)
            return
        if message["type"] != "http.response.body":
            await self.downstream(message)
            return
        more = message.get("more_body", False)
        self.pending += self._decoded(message.get("body", b""))
        if self.decoder is not None and not more and self.broken is None:
            try:
                self.decoder.end()
            except CodingError as exc:
                self._break(str(exc))
        if self.sse:
            if self.broken is None or self.pending or not more:
                await self._send_events(more)
            return
        if len(self.pending) > MAX_ANSWER_BYTES:
            self._break(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
        if not more:
            await self._send_whole()

    async def _send_whole(self) -> None:
        assert self.start is not None
        if self.broken is not None:
            await send_json(self.downstream, 502, self._error_object(self.broken))
            return
        body = self.pending
        if body:
            try:
                body = self._filtered(body) or body
            except NotJson as exc:
                if self.json:
                    await send_json(self.downstream, 502, self._error_object(str(exc)))
                    return
                # Neither JSON nor a success (a backend's plain-text error page): no list
                # result a client would read, so it passes as it came.
        length = (b"content-length", str(len(body)).encode())
        await self.downstream({**self.start, "headers": [*self.start["headers"], length]})
        await self.downstream({"type": "http.response.body", "body": body, "more_body": False})

    def _error_object(self, why: str) -> dict[str, object]:
        text = f"the gateway could not filter the backend's answer: {why}"
        return error(self.request_id, INTERNAL_ERROR, text)
