"""The client's GET stream on a federated route: every target's own GET stream merged into one,
one whole event at a time, each event under an id of the gateway's own and kept (`backlog`) so
that the client can resume the stream with `Last-Event-ID`, at this replica or another.

A client naming one of its session's kept events gets the kept events after it, then its
targets' streams resumed from their cursors, then what comes; with any other id, or none, the
stream starts from now, with a priming event (an id, no data) for clients that read one. A
stream still open for the session (the client left it, and the gateway has not noticed yet) is
taken over by a client resuming; otherwise a second stream is refused (409, as before).

A target's messages are rewritten on the way (`rewrite.from_target`), its requests' ids made
known to the other replicas before the client gets them (`exchange`). A target opened again
while the stream is open (it was down, or restarted) joins with a stream of its own. A target
whose stream ends after it gave event ids (it closes streams for clients to come back, or it
replayed what it kept and ended) is asked again from its cursor, until it gives nothing
MAX_QUIET_REOPENS times in a row; one whose stream breaks off, or that gives no ids, is left
out until its session is opened again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ... import jsonrpc
from ...asgi import Receive, Scope, Send, send_error
from ...jsonrpc import INVALID_REQUEST
from ..upstream import UpstreamError, UpstreamResponse
from . import replies
from .backlog import (
    Backlog,
    Cursor,
    Replay,
    cursor_value,
    event_id,
    primes,
    shown_id,
    sse_event,
)
from .directory import Directory
from .fanout import Fanout
from .rewrite import from_target, progress_of, stray_progress, withdrawn_id
from .session import ClientSession
from .sse import sse_events
from .streams import STREAM_HEADERS, while_connected
from .target import MAX_ANSWER_BYTES

log = logging.getLogger("mcp_oauth_gateway.federation")

# Seconds before a target's stream that ended is asked again, by how many times in a row it
# has given nothing since; once it gave nothing that many times, it is left out.
REOPEN_PAUSES = (0.0, 0.5, 1.0)
MAX_QUIET_REOPENS = len(REOPEN_PAUSES)
# Opens a target's GET stream, after its own event id when given (None: it offers none, or
# failed).
OpenStream = Callable[[str, str | None], Awaitable[UpstreamResponse | None]]
_ALLOW = b"POST, GET, DELETE"


class Listener:
    """A federated route rule's way to serve its clients' GET streams."""

    def __init__(
        self,
        fan: Fanout,
        directory: Directory,
        backlog: Backlog,
        refused: Callable[[Scope, str], str],
    ):
        self.fan = fan
        self.directory = directory
        self.backlog = backlog
        self.refused = refused

    async def get(self, scope: Scope, session: ClientSession, receive: Receive, send: Send) -> None:
        """The session's GET stream, resumed after the client's `Last-Event-ID` when it is
        one of the session's kept events; one at a time."""
        last = event_id(session.id, dict(scope["headers"]).get(b"last-event-id"))
        replay = await self.backlog.resume(session, last) if last is not None else None
        while session.listening:
            if replay is None:
                why = self.refused(scope, "the session's GET stream is already open")
                await replies.reply(send, 409, jsonrpc.error(None, INVALID_REQUEST, why))
                return
            # The client resumes the stream it left: the one still open here ends.
            session.stop_listening.set()
            await session.listened.wait()
        session.listening = True
        session.stop_listening.clear()
        session.listened.clear()
        try:
            await self._listen(scope, session, replay, receive, send)
        finally:
            session.listening = False
            session.listened.set()

    async def _listen(
        self,
        scope: Scope,
        session: ClientSession,
        replay: Replay | None,
        receive: Receive,
        send: Send,
    ) -> None:
        opened = await self.fan.listen(scope, session, replay.cursors if replay else None)
        await self.directory.store(session)
        if not opened and not (replay and replay.events):
            why = "none of the MCP servers behind this route offers a GET stream"
            await send_error(send, 405, "method_not_allowed", why, [(b"allow", _ALLOW)])
            return
        targets = session.targets

        async def open_stream(name: str, cursor: str | None) -> UpstreamResponse | None:
            return await self.fan.stream_of(scope, targets[name], cursor)

        await serve(opened, session, self.backlog, open_stream, replay, receive, send)


def _target_session(session: ClientSession, target: str) -> str | None:
    held = session.targets.get(target)
    found = held.session_id if held is not None else None
    return found.decode("latin-1") if found is not None else None


class ClientStream:
    """One client's GET stream while it is served."""

    def __init__(
        self,
        session: ClientSession,
        backlog: Backlog,
        open_stream: OpenStream,
        send: Send,
        cursors: Mapping[str, Cursor],
    ):
        self.session = session
        self.backlog = backlog
        self.open_stream = open_stream
        self.send = send
        # Where each target's stream is at (its session then, its own id of the last event).
        self.cursors = dict(cursors)
        self.sending = asyncio.Lock()
        # The targets' streams opened here (joined, or asked again) until each is released.
        self.responses: list[UpstreamResponse] = []

    async def write(self, kept_id: str | None, data: bytes) -> None:
        """One event to the client."""
        shown = shown_id(self.session.id, kept_id) if kept_id is not None else None
        body = sse_event(shown, data)
        await self.send({"type": "http.response.body", "body": body, "more_body": True})

    async def forward(self, target: str, own_id: bytes | None, data: bytes) -> bool:
        """A target's event, rewritten, kept and sent; whether it reached the client."""
        try:
            message = jsonrpc.read_message(data)
        except ValueError:
            log.info("federated target sent an event that is not JSON")
            return False
        if not isinstance(message, dict):
            return False
        exchanges = self.session.exchanges
        if stray_progress(message, target, exchanges) and not (
            await exchanges.progress_elsewhere(target, progress_of(message))
        ):
            log.debug("federated target %s: progress of no call of its dropped", target)
            return False
        withdrawn = withdrawn_id(message)
        if withdrawn is not None:
            await exchanges.recall(target, withdrawn)
        out = from_target(message, target, exchanges)
        await exchanges.settle()
        cursor = cursor_value(own_id)
        moved = (_target_session(self.session, target), cursor) if cursor is not None else None
        if moved is not None:
            self.cursors[target] = moved
        if out is None:
            return False
        async with self.sending:
            body = jsonrpc.write_message(out)
            await self.write(await self.backlog.keep(self.session, body, target, moved), body)
        return True

    async def relay(self, target: str, response: UpstreamResponse) -> tuple[bool, int]:
        """The target's stream until it ends: whether it ended cleanly, and how many of its
        events reached the client."""
        sent = 0
        try:
            async for own_id, data in sse_events(response.chunks(), MAX_ANSWER_BYTES):
                sent += await self.forward(target, own_id, data)
        except (UpstreamError, ValueError) as exc:
            log.info("federated target %s: its GET stream broke off: %s", target, exc)
            return False, sent
        return True, sent

    async def follow(
        self, target: str, response: UpstreamResponse | None, own: bool = False
    ) -> None:
        """The target's stream, and again from its cursor after it ends (see the module); the
        streams opened here (`own`) are released as they end."""
        quiet = 0
        while response is not None:
            try:
                ended, sent = await self.relay(target, response)
            finally:
                if own:
                    self._release(response)
            held = self.cursors.get(target)
            if not ended or held is None or held[0] != _target_session(self.session, target):
                return
            quiet = 0 if sent else quiet + 1
            if quiet >= MAX_QUIET_REOPENS:
                return
            await asyncio.sleep(REOPEN_PAUSES[quiet])
            response, own = await self._open(target, held[1]), True

    async def _open(self, target: str, cursor: str | None) -> UpstreamResponse | None:
        response = await self.open_stream(target, cursor)
        if response is not None:
            self.responses.append(response)
        return response

    def _release(self, response: UpstreamResponse) -> None:
        for at, held in enumerate(self.responses):
            if held is response:
                del self.responses[at]
                response.release()
                return

    async def join(self, target: str) -> None:
        """A target whose session was opened again: its new stream, from now."""
        self.cursors.pop(target, None)
        await self.follow(target, await self._open(target, None), own=True)

    async def merge(self, opened: Mapping[str, UpstreamResponse]) -> None:
        """Every target's stream onto the client's until all have ended, the targets named on
        the session's `joining` queue joining."""
        joining = self.session.joining
        running = {name: asyncio.ensure_future(self.follow(name, r)) for name, r in opened.items()}

        def next_join() -> asyncio.Future[str] | None:
            return asyncio.ensure_future(joining.get()) if joining is not None else None

        waiter = next_join()
        try:
            while live := {t for t in running.values() if not t.done()}:
                watched: set[asyncio.Future[Any]] = {*live, *([waiter] if waiter else [])}
                await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                if waiter is not None and waiter.done():
                    name = waiter.result()
                    if name not in running or running[name].done():
                        running[name] = asyncio.ensure_future(self.join(name))
                    waiter = next_join()
        finally:
            tasks: list[asyncio.Future[Any]] = [*running.values(), *([waiter] if waiter else [])]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for response in self.responses:
                response.release()


async def serve(
    opened: Mapping[str, UpstreamResponse],
    session: ClientSession,
    backlog: Backlog,
    open_stream: OpenStream,
    replay: Replay | None,
    receive: Receive,
    send: Send,
) -> None:
    """The client's GET stream: what it missed (`replay`, when it resumes) or a priming event,
    then the targets' `opened` streams (each released at the end) merged; until the client
    leaves, a client resuming takes the stream over, or every target's stream ended."""
    try:
        await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
        stream = ClientStream(session, backlog, open_stream, send, replay.cursors if replay else {})
        if replay is not None:
            for kept_id, data in replay.events:
                await stream.write(kept_id, data)
        elif primes(session.version):
            primed = await backlog.prime(session)
            if primed is not None:
                await stream.write(primed, b"")
        session.joining = asyncio.Queue()
        await while_connected(stream.merge(opened), receive, session.stop_listening)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        session.joining = None
        for response in opened.values():
            response.release()
