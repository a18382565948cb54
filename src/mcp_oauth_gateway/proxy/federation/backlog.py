"""The client's GET stream on a federated route, kept so that it can be resumed: each event the
gateway writes on it carries an id of the gateway's own (`<tag>:<ms>-<n>`, rising; the tag is
the session's, a digest of its id, so that an id is told apart from every other session's), and
the session keeps its last MAX_EVENTS events and, per target, the target's own id of the last
event taken from it (its cursor, with the target session it belongs to).

A client that opens its GET stream with `Last-Event-ID` naming one of its own session's kept
events gets the kept events after it, then its targets' streams resumed from their cursors (a
target that keeps its own events sends what it sent while no stream of this session was open),
then the live stream. Any other id (another session's, forged, or older than the kept window)
starts the stream from now, as MCP has a server do with an id it cannot resume from: ids are
looked up in the session's own backlog only, so another session's events are never reachable.
A new stream starts with an event that holds only an id (MCP's priming event, for clients of
2025-11-25 and later), so a client cut off before any event can resume too.

What is not kept: an event larger than MAX_EVENT_BYTES, or one that could not be stored, goes to
the client live and without an id (a target that keeps its events sends it again on a resume:
its cursor did not move). Without Redis (`MemoryBacklog`) the backlog lives with the session in
the process; with Redis (`shared_backlog`) every replica sharing it resumes the same ids."""

from __future__ import annotations

import hashlib
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

# Events kept per session for a client that resumes; older ones are dropped first.
MAX_EVENTS = 128
# An event larger than this goes to the client live only (a sampling request with images, say).
MAX_EVENT_BYTES = 64 * 1024
# A target's event id longer than this is not kept as its cursor (nor sent back to it).
MAX_CURSOR_BYTES = 256
# The first protocol version whose clients read an event with an id and no data (priming).
PRIMING_SINCE = "2025-11-25"
_EVENT_ID = re.compile(r"([0-9a-f]{8}):([0-9]{1,19}-[0-9]{1,19})")
_HEADER_SAFE = re.compile(rb"[\x21-\x7e]+")

# A target's cursor: (its session id then, its own id of the last event taken from it).
Cursor = tuple[str | None, str]


@dataclass(frozen=True)
class Replay:
    """What a client resuming its stream gets before the live events: the kept events after
    its last (id, data), and where each target's stream goes on from."""

    events: tuple[tuple[str, bytes], ...]
    cursors: dict[str, Cursor]


def _tag(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()[:8]


def shown_id(session_id: str, kept_id: str) -> str:
    """A kept event's id as the session's client gets it."""
    return f"{_tag(session_id)}:{kept_id}"


def event_id(session_id: str, value: bytes | None) -> str | None:
    """The kept id a client's `Last-Event-ID` names in its own session; None when it names
    none (malformed, or another session's)."""
    if value is None:
        return None
    found = _EVENT_ID.fullmatch(value.decode("latin-1").strip())
    if found is None or found[1] != _tag(session_id):
        return None
    return found[2]


def _order(kept_id: str) -> tuple[int, int]:
    ms, _, n = kept_id.partition("-")
    return int(ms), int(n)


def cursor_value(own_id: bytes | None) -> str | None:
    """A target's event id as a cursor to send back to it; None when it is none, too long, or
    not safe in a header."""
    if own_id is None or len(own_id) > MAX_CURSOR_BYTES or not _HEADER_SAFE.fullmatch(own_id):
        return None
    return own_id.decode("ascii")


def sse_event(kept_id: str | None, data: bytes) -> bytes:
    """One event of the client's GET stream (an id-only event when `data` is empty)."""
    head = b"id: " + kept_id.encode() + b"\n" if kept_id is not None else b""
    return head + b"data: " + data + b"\n\n"


def primes(version: str) -> bool:
    """Whether a client of `version` reads a priming event (an id, empty data)."""
    return version >= PRIMING_SINCE


class Held(Protocol):
    """A client session as a backlog sees it (`session.ClientSession`)."""

    @property
    def id(self) -> str:
        """The session's id."""
        ...

    @property
    def backlog(self) -> EventLog:
        """Its kept events, when they are kept in this process."""
        ...


class Backlog(Protocol):
    """Where a route rule keeps its sessions' GET stream events."""

    async def keep(
        self, session: Held, data: bytes, target: str, cursor: Cursor | None
    ) -> str | None:
        """Keep `target`'s event `data` (`cursor`: where the target's stream is at it): its
        id, or None when it is not kept."""
        ...

    async def prime(self, session: Held) -> str | None:
        """The id a new stream starts at (None: none can be given)."""
        ...

    async def resume(self, session: Held, last: str) -> Replay | None:
        """What follows the client's `last` event; None when `last` is not one of the
        session's kept events."""
        ...


@dataclass
class EventLog:
    """One session's kept events in this process (no Redis)."""

    events: deque[tuple[str, bytes]] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    cursors: dict[str, Cursor] = field(default_factory=dict)
    last: tuple[int, int] = (0, -1)

    def next_id(self) -> str:
        """A new id, above every earlier one (the clock going back does not lower it)."""
        ms = time.time_ns() // 1_000_000
        self.last = (ms, 0) if ms > self.last[0] else (self.last[0], self.last[1] + 1)
        return f"{self.last[0]}-{self.last[1]}"


class MemoryBacklog:
    """The backlog of a route rule whose sessions live in one process."""

    async def keep(
        self, session: Held, data: bytes, target: str, cursor: Cursor | None
    ) -> str | None:
        """Kept with the session (see `Backlog.keep`)."""
        if len(data) > MAX_EVENT_BYTES:
            return None
        log = session.backlog
        kept_id = log.next_id()
        log.events.append((kept_id, data))
        if cursor is not None:
            log.cursors[target] = cursor
        return kept_id

    async def prime(self, session: Held) -> str | None:
        """The last kept id, or a new one kept without data."""
        log = session.backlog
        if log.events:
            return log.events[-1][0]
        kept_id = log.next_id()
        log.events.append((kept_id, b""))
        return kept_id

    async def resume(self, session: Held, last: str) -> Replay | None:
        """The session's kept events after `last` (see `Backlog.resume`)."""
        log = session.backlog
        if not any(kept_id == last for kept_id, _ in log.events):
            return None
        after = _order(last)
        events = tuple((i, d) for i, d in log.events if _order(i) > after and d)
        return Replay(events, dict(log.cursors))
