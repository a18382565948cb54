"""SIGTERM's drain, as the data plane sees it: readiness says `draining` at once, and event streams
end where their clients can resume them, elsewhere.

A stream is ended between two events, never inside one, with a `retry:` field asking the client
to reconnect soon: through the load balancer to another replica, sending `Last-Event-ID` when the
stream carried event ids, so a server that keeps its events (or a federated route) resumes it.
A GET stream only waits for events: it ends as soon as the drain starts. A POST answered as a
stream waits for its call's answer, which the server sends and then ends the stream with: it is
left to finish, and ended the same way only once `POST_STREAM_SHARE` of the grace period has
passed, so a client whose call runs longer can still resume it before the grace period's end
cuts whatever still runs (`app.SHUTDOWN_END_WAIT`).

The listeners, idle connections and the grace period are the HTTP server's (`server.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("mcp_oauth_gateway")

# How soon a client reconnects (milliseconds): half the SDKs' one-second default, so a stream
# moves to another replica at once, while the two attempts both SDKs allow still span a second
# should the first reach a replica that is itself going away.
RETRY_MS = 500
RETRY = b"retry: %d\n\n" % RETRY_MS
# The share of the grace period a POST stream keeps for its answer before it is ended.
POST_STREAM_SHARE = 0.9
# The bytes of a stream's end that tell whether it stops between events.
TAIL = 4


def ends_event(tail: bytes) -> bool:
    """Whether an event stream whose last bytes are `tail` stops between two events: its last
    line is empty (an event ends with an empty line; CR, LF and CRLF all end a line), or
    nothing was sent."""
    if not tail:
        return True
    if tail.endswith(b"\r\n"):
        rest = tail[:-2]
    elif tail.endswith((b"\n", b"\r")):
        rest = tail[:-1]
    else:
        return False
    # An empty `rest` is a stream whose first line is empty: also between events.
    return not rest or rest.endswith((b"\n", b"\r"))


class Stream:
    """One event stream relayed to a client: where its bytes stand, and whether it is ending."""

    __slots__ = ("ending", "get", "stopped", "tail", "task")

    def __init__(self, task: asyncio.Task[object] | None, get: bool):
        self.task = task
        self.get = get
        self.tail = b""
        # Asked to end at its next event boundary.
        self.ending = False
        # Stopped at a boundary: the request's task is cancelled, and what the relay still
        # sends is dropped (a client resuming with Last-Event-ID gets it from the server).
        self.stopped = False

    def between_events(self) -> bool:
        """Whether what was sent so far ends between two events."""
        return ends_event(self.tail)

    def wrote(self, body: bytes) -> None:
        """`body` reached the client; stop here if ending and this ends an event."""
        if not body:
            return
        self.tail = (self.tail + body)[-TAIL:]
        if self.ending and ends_event(self.tail):
            self.stop()

    def end(self) -> None:
        """End at the next event boundary: now when between events, but for a POST stream
        that sent nothing yet (its first event may be the call's answer, which a client could
        not resume without an event id), after its first event."""
        self.ending = True
        if not self.stopped and self.between_events() and (self.tail or self.get):
            self.stop()

    def stop(self) -> None:
        """Cancel the request's task: the entry point ends the response (`retry:` first)."""
        self.stopped = True
        if self.task is not None:
            self.task.cancel()


class Drain:
    """One process's drain: since when, and the event streams open."""

    def __init__(self, grace: float):
        self.grace = grace
        self.since: float | None = None
        self.streams: set[Stream] = set()
        # Past the POST streams' share of the grace period: every stream ends.
        self.late = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def draining(self) -> bool:
        """Whether SIGTERM (or SIGINT) started the drain."""
        return self.since is not None

    def opened(self, task: asyncio.Task[object] | None, method: str) -> Stream:
        """A stream a request (served by `task`) starts; ended at once when the drain already
        ends its kind."""
        stream = Stream(task, method == "GET")
        self.streams.add(stream)
        if self.since is not None and (stream.get or self.late):
            stream.end()
        return stream

    def closed(self, stream: Stream) -> None:
        """The stream's response ended."""
        self.streams.discard(stream)

    def start(self) -> int:
        """Start draining (once): GET streams end, POST streams later. How many streams were
        open."""
        if self.since is not None:
            return len(self.streams)
        self.since = time.monotonic()
        for stream in list(self.streams):
            if stream.get:
                stream.end()
        self._timer = asyncio.get_running_loop().call_later(
            self.grace * POST_STREAM_SHARE, self.end_all
        )
        return len(self.streams)

    def end_all(self) -> None:
        """End every stream at its next event boundary (the grace period is nearly over)."""
        self.late = True
        if self.streams:
            log.info(
                "draining: the grace period is nearly over: %d streams end at their next "
                "event boundary",
                len(self.streams),
            )
        for stream in list(self.streams):
            stream.end()

    def stop(self) -> None:
        """The drain is over: no timer left behind."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
