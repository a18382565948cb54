"""The response side of one request, handed to every step of its way as its `send`: what was
sent (for the access line, the metrics and the audit line), the stream the drain watches, and
the request's audit line, written once: when the answer starts, or when the request ends."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ..asgi import Message, Send
from .audit_trail import AuditLine
from .drain import RETRY, Drain, Stream

# How long a stream cut at shutdown may take to be ended cleanly (a client not reading).
SHUTDOWN_END_WAIT = 1.0


class Exchange:
    """The response side of one request: what was sent, for the log, metrics and shutdown."""

    __slots__ = (
        "audit",
        "complete",
        "cut",
        "drain",
        "method",
        "request_id",
        "route",
        "send",
        "span",
        "started",
        "status",
        "stream",
        "task",
    )

    def __init__(self, send: Send, drain: Drain | None = None, method: str = ""):
        self.send = send
        # Set by the request-id step; None: the request has no id.
        self.request_id: str | None = None
        self.status = 0
        self.started = False
        self.complete = False
        # Cancelled when the grace period ended: a warning instead of the access line.
        self.cut = False
        self.route = "-"
        # The request's audit line, written once the answer starts (or the request ends).
        self.audit: AuditLine | None = None
        # The request's trace span (None: not traced).
        self.span: Any = None
        # An event stream answered to the client, watched by the drain (None: none, or the
        # gateway's own listeners).
        self.drain = drain
        self.method = method
        self.stream: Stream | None = None
        # The request's own task (stages may send from tasks of theirs): what the drain cancels.
        self.task = asyncio.current_task() if drain is not None else None

    def undrained(self) -> None:
        """The drain never watches this request (one to the gateway's own listeners)."""
        self.drain = None
        self.task = None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if self.request_id is not None:
                # The gateway's id replaces one a backend may have echoed: one value only.
                message = {
                    **message,
                    "headers": [
                        *(h for h in message.get("headers", ()) if h[0] != b"x-request-id"),
                        (b"x-request-id", self.request_id.encode()),
                    ],
                }
            await self.send(message)
            # Only once the server took it: a response it refused was never sent.
            self.status = message["status"]
            line, self.audit = self.audit, None
            if line is not None:
                line.write(self.status)
            if self.drain is not None and _is_event_stream(message):
                self.stream = self.drain.opened(self.task, self.method)
            return
        stream = self.stream
        if stream is None:
            await self.send(message)
            if not message.get("more_body", False):
                self.complete = True
            return
        if stream.stopped:
            return  # ended for the drain: the entry point writes the end
        await self.send(message)
        if not message.get("more_body", False):
            self.complete = True
            self.forget_stream()
        else:
            stream.wrote(message.get("body", b""))

    def finish(self) -> None:
        """The request ended: the drain stops watching its stream, and its audit line, if no
        answer started, is written now (taken before it is written: written once, even if
        writing it fails)."""
        self.forget_stream()
        line, self.audit = self.audit, None
        if line is not None:
            line.write(self.status)

    def forget_stream(self) -> None:
        """The drain no longer watches this exchange's stream (it ended, or the request did)."""
        if self.stream is not None and self.drain is not None:
            self.drain.closed(self.stream)

    async def end_cleanly(self) -> None:
        """End a started response (a stream the drain stopped, or one cut when the grace period
        ended), within a bounded wait; a stream stopped between events gets `retry:` first."""
        self.forget_stream()
        if self.started and not self.complete:
            stream = self.stream
            body = RETRY if stream is not None and stream.between_events() else b""
            self.complete = True
            with contextlib.suppress(Exception):
                async with asyncio.timeout(SHUTDOWN_END_WAIT):
                    await self.send(
                        {"type": "http.response.body", "body": body, "more_body": False}
                    )


def _is_event_stream(start: Message) -> bool:
    """Whether a response head announces an event stream the drain can read and end: one sent
    compressed has no event boundaries to see, and no field can be added to it."""
    headers = start.get("headers", ())
    for name, value in headers:
        # The length first, and out at the content type: this runs for every response.
        if len(name) == 12 and name.lower() == b"content-type":
            if value[:17].lower() != b"text/event-stream":
                return False
            return not any(
                len(other) == 16
                and other.lower() == b"content-encoding"
                and coding.strip().lower() not in (b"", b"identity")
                for other, coding in headers
            )
    return False
