"""A federated session's GET stream events kept for a client that resumes, the same in one
process (MemoryBacklog) and in a real Redis shared by replicas (SharedSessions): ids rise; the
events after a kept id come back with the targets' cursors; any other id (another session's,
forged, malformed, or pushed out of the window) resumes nothing; an event too large is not kept;
and the pure parts: a client's `Last-Event-ID` read, a target's id kept as a cursor only when it
is safe to send back, the events as written, priming by protocol version, and the ids of a
target's stream read as the event stream format says."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.proxy.federation.backlog import (
    MAX_CURSOR_BYTES,
    MAX_EVENT_BYTES,
    MAX_EVENTS,
    Backlog,
    EventLog,
    MemoryBacklog,
    cursor_value,
    event_id,
    primes,
    shown_id,
    sse_event,
)
from mcp_oauth_gateway.proxy.federation.shared import SharedSessions
from mcp_oauth_gateway.proxy.federation.sse import sse_events
from mcp_oauth_gateway.redis_clients import RedisConnection
from unit.fuzz_settings import FUZZ


@dataclass
class Held:
    """A session as a backlog sees it."""

    id: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    backlog: EventLog = field(default_factory=EventLog)


@pytest.fixture(params=["memory", "redis"])
async def backlog(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Backlog]:
    if request.param == "memory":
        yield MemoryBacklog()
        return
    shared = SharedSessions(
        RedisConnection(redis_url), f"default/backlog-{secrets.token_hex(4)}", 0
    )
    try:
        yield shared
    finally:
        await shared.connection.close()


def _order(kept: str) -> tuple[int, int]:
    ms, n = kept.split("-")
    return int(ms), int(n)


async def test_the_events_after_a_kept_id_come_back_with_the_targets_cursors(backlog):
    session = Held()
    primed = await backlog.prime(session)
    assert primed is not None
    first = await backlog.keep(session, b'{"n":1}', "a", ("sess-a", "a-1"))
    second = await backlog.keep(session, b'{"n":2}', "b", None)
    third = await backlog.keep(session, b'{"n":3}', "a", ("sess-a", "a-2"))
    assert first
    assert second
    assert third
    assert _order(primed) < _order(first) < _order(second) < _order(third)
    resumed = await backlog.resume(session, first)
    assert resumed is not None
    assert resumed.events == ((second, b'{"n":2}'), (third, b'{"n":3}'))
    assert resumed.cursors == {"a": ("sess-a", "a-2")}
    # From the priming id: every event, the priming one itself holding nothing to send.
    everything = await backlog.resume(session, primed)
    assert everything is not None
    assert [data for _, data in everything.events] == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    # The last id: nothing missed. A new stream starts at it.
    assert (await backlog.resume(session, third)) is not None
    assert (await backlog.resume(session, third)).events == ()
    assert await backlog.prime(session) == third


async def test_a_made_up_id_resumes_nothing_and_no_id_reaches_another_sessions_events(backlog):
    mine, theirs = Held(), Held()
    theirs_id = await backlog.keep(theirs, b'{"secret":1}', "a", ("s", "1"))
    await backlog.keep(theirs, b'{"secret":2}', "a", ("s", "2"))
    assert theirs_id is not None
    await backlog.keep(mine, b'{"mine":1}', "a", None)
    # Kept ids are the session's own: one that happens to be another session's too (the same
    # millisecond) reaches this session's events at most (the shown ids tell them apart).
    resumed = await backlog.resume(mine, theirs_id)
    assert resumed is None or all(b"secret" not in data for _, data in resumed.events)
    ms, n = _order(theirs_id)
    for made_up in (f"{ms}-{n + 7}", "0-0", "1-1", f"{ms - 1000}-0"):
        assert await backlog.resume(mine, made_up) is None
    # A session with nothing kept yet resumes nothing either.
    assert await backlog.resume(Held(), theirs_id) is None


async def test_an_id_pushed_out_of_the_window_resumes_nothing(backlog):
    session = Held()
    oldest = await backlog.keep(session, b"{}", "a", None)
    assert oldest is not None
    kept = [await backlog.keep(session, b"{}", "a", None) for _ in range(MAX_EVENTS)]
    assert await backlog.resume(session, oldest) is None
    resumed = await backlog.resume(session, kept[0])
    assert resumed is not None
    assert len(resumed.events) == MAX_EVENTS - 1


async def test_an_event_too_large_goes_unkept_and_leaves_the_cursor(backlog):
    session = Held()
    first = await backlog.keep(session, b"{}", "a", ("s", "1"))
    assert first is not None
    assert await backlog.keep(session, b"x" * (MAX_EVENT_BYTES + 1), "a", ("s", "2")) is None
    resumed = await backlog.resume(session, first)
    assert resumed is not None
    assert resumed.events == ()
    assert resumed.cursors == {"a": ("s", "1")}


async def test_ids_rise_while_events_are_kept_at_once(backlog):
    session = Held()
    kept = await asyncio.gather(*(backlog.keep(session, b"{}", "a", None) for _ in range(20)))
    assert all(k is not None for k in kept)
    assert len(set(kept)) == 20


SESSION = "s3ss10n"
TAG = shown_id(SESSION, "1-1").split(":")[0]


@pytest.mark.parametrize(
    ("header", "read"),
    [
        (f"{TAG}:1733500000000-0".encode(), "1733500000000-0"),
        (f" {TAG}:12-3 ".encode(), "12-3"),
        (None, None),
        (b"", None),
        (b"1733500000000-0", None),
        (shown_id("another session", "12-3").encode(), None),
        (f"{TAG}:12".encode(), None),
        (f"{TAG}:12-".encode(), None),
        (f"{TAG}:-3".encode(), None),
        (f"{TAG}:1-2-3".encode(), None),
        (f"{TAG}:a-1".encode(), None),
        (f"{TAG}:12-3\x00".encode(), None),
        (f"{TAG}:{'1' * 20}-0".encode(), None),
        (f"{TAG}:+".encode(), None),
        (f"{TAG}:(12-3".encode(), None),
        (f"{TAG.upper()}:12-3".encode(), None),
    ],
)
def test_a_last_event_id_is_read_only_as_one_of_the_sessions_own_ids(header, read):
    assert event_id(SESSION, header) == read


def test_a_shown_id_is_read_back_in_its_session_only():
    shown = shown_id(SESSION, "1733500000000-4")
    assert event_id(SESSION, shown.encode()) == "1733500000000-4"
    assert event_id("another", shown.encode()) is None


@given(st.binary(max_size=40))
@FUZZ
def test_whatever_a_client_sends_as_last_event_id_is_an_id_or_nothing(header):
    read = event_id(SESSION, header)
    assert read is None or all(part.isdigit() for part in read.split("-"))


def test_a_targets_event_id_is_kept_only_when_it_can_be_sent_back_in_a_header():
    assert cursor_value(b"3a9f-17") == "3a9f-17"
    assert cursor_value(None) is None
    assert cursor_value(b"") is None
    for unsafe in (b"a b", b"a\r\nx: y", b"caf\xc3\xa9", b"a\x7f"):
        assert cursor_value(unsafe) is None
    assert cursor_value(b"x" * MAX_CURSOR_BYTES) is not None
    assert cursor_value(b"x" * (MAX_CURSOR_BYTES + 1)) is None


def test_events_as_the_client_reads_them_and_who_is_primed():
    assert sse_event("5-1", b'{"a":1}') == b'id: 5-1\ndata: {"a":1}\n\n'
    assert sse_event(None, b"{}") == b"data: {}\n\n"
    assert sse_event("5-2", b"") == b"id: 5-2\ndata: \n\n"
    assert primes("2025-11-25")
    assert primes("2026-07-28")
    assert not primes("2025-06-18")
    assert not primes("2024-11-05")


async def _read(*chunks: bytes) -> list[tuple[bytes | None, bytes]]:
    async def parts() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return [event async for event in sse_events(parts(), 1 << 16)]


async def test_a_targets_event_ids_are_read_as_the_event_stream_format_says():
    read = await _read(
        b"id: 1\ndata: a\n\n",
        b"data: b\n\n",  # no id line: the last id stands
        b"id: 2\r\nretry: 10\r\ndata: c\r\n\r\n",
        b"id: 3\x00\ndata: d\n\n",  # an id holding NUL is ignored
        b"id:4\ndata:e\n\n",
        b"id\ndata: f\n\n",  # an id without a value clears it
        b"id: 5\n\n",  # an id alone is no event, but the id stands
        b"id: 6\ndata: \n\n",  # nor is an empty data (a priming event)
        b"data:\ndata:\n\n",  # two empty data lines are a line break
        b"data: g\n\n",
    )
    assert read == [
        (b"1", b"a"),
        (b"1", b"b"),
        (b"2", b"c"),
        (b"2", b"d"),
        (b"4", b"e"),
        (None, b"f"),
        (b"6", b"\n"),
        (b"6", b"g"),
    ]
