"""`notifications/elicitation/complete` on the client's GET stream (2025-11-25), the only place a
server may tell a client something after the answer to its request.

A GET stream proxied from the backend gets the notification slipped in between two of the
backend's events, once an elicitation made for its session is done. A client whose grant is
gone cannot open one at the backend: the gateway holds its GET stream itself, tells it when the
user connected, and ends it, so the client opens it again, at the backend, with the new token.
Completion is read from the grant store (any replica may have served the link), and a page done
on this replica wakes its streams at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import orjson

from ..asgi import Message, Send
from ..mcp_methods import ELICITATION_COMPLETE
from ..usertokens.locking import StoreError
from .connects import LIFETIME

log = logging.getLogger("mcp_oauth_gateway.useroauth")
# How often a waiting stream reads the store for a completion made on another replica.
POLL = 1.0
_BOUNDARIES = (b"\n\n", b"\r\r", b"\r\n\r\n")

Finished = Callable[[str], Awaitable[bool]]


def complete_event(eid: str) -> bytes:
    """The notification as one SSE event."""
    message = {
        "jsonrpc": "2.0",
        "method": ELICITATION_COMPLETE,
        "params": {"elicitationId": eid},
    }
    return b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"


class Listener:
    """One client GET stream: what it was sent, so a notification goes in only between events."""

    def __init__(self, send: Send):
        self._send = send
        self._lock = asyncio.Lock()
        self._at_boundary = True
        self._queued: list[bytes] = []
        self.wake = asyncio.Event()
        self.watching: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, message: Message) -> None:
        """The backend's messages, passed on; queued notifications follow an event's end."""
        async with self._lock:
            await self._send(message)
            if message["type"] != "http.response.body":
                return
            chunk: bytes = message.get("body", b"")
            if chunk:
                self._at_boundary = chunk.endswith(_BOUNDARIES)
            if self._at_boundary and self._queued and message.get("more_body", False):
                await self._flush()

    async def inject(self, event: bytes) -> None:
        """Send `event` now if the stream is between events, else after the current one."""
        async with self._lock:
            self._queued.append(event)
            if self._at_boundary:
                await self._flush()

    async def _flush(self) -> None:
        body, self._queued = b"".join(self._queued), []
        await self._send({"type": "http.response.body", "body": body, "more_body": True})

    def watch(self, eid: str, finished: Finished) -> asyncio.Task[None] | None:
        """Tell this stream when elicitation `eid` is done (within its lifetime); the task
        that waits (None: one already does)."""
        if eid in self.watching:
            return None
        self.watching.add(eid)
        task = asyncio.create_task(self._await(eid, finished))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _await(self, eid: str, finished: Finished) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LIFETIME
        while loop.time() < deadline:
            try:
                done = await finished(eid)
            except StoreError as exc:
                log.warning("cannot tell whether a connect link was completed: %s", exc)
                done = False
            if done:
                await self.inject(complete_event(eid))
                return
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL):
                    await self.wake.wait()

    def close(self) -> None:
        """The stream ended: stop waiting for it."""
        for task in list(self.tasks):
            task.cancel()


class Streams:
    """The GET streams of this replica, by the grant they use and the client's session."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], set[Listener]] = {}

    def open(self, key: str, session: str, send: Send) -> Listener:
        """A stream starting."""
        listener = Listener(send)
        self._open.setdefault((key, session), set()).add(listener)
        return listener

    def closed(self, key: str, session: str, listener: Listener) -> None:
        """A stream ended."""
        listener.close()
        listeners = self._open.get((key, session))
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._open[(key, session)]

    def arm(self, key: str, session: str, eid: str, finished: Finished) -> None:
        """An elicitation was sent to this session: its streams here will be told when done."""
        for listener in self._open.get((key, session), ()):
            listener.watch(eid, finished)

    def wake(self, key: str) -> None:
        """A link was completed on this replica: the streams of that grant look now."""
        for (held, _), listeners in self._open.items():
            if held == key:
                for listener in listeners:
                    listener.wake.set()
