"""The client's GET stream on a federated route resumed in one process (no Redis), over targets
played in memory: every event carries an id of the gateway's; a client resuming after one of its
session's ids gets what it missed, then the live stream, its targets' streams resumed from their
own ids; any other id (another session's, forged, malformed) starts from now with a priming
event; a client resuming takes over the stream it left; a target still holding the previous
stream (409) is asked again; and a target whose stream ends after giving ids is asked again from
where it was."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from mcp_oauth_gateway.proxy.federation import fanout, get_stream

from .federation_targets import Targets, open_session, rpc, sse, stage
from .harness import drive

Headers = list[tuple[bytes, bytes]]


def note(n: int, own_id: str | None = None) -> bytes:
    """A target's log message `n` on its GET stream (under its own event id, when given)."""
    params = {"level": "info", "data": n}
    message = {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
    head = f"id: {own_id}\n".encode() if own_id is not None else b""
    return head + b"data: " + orjson.dumps(message) + b"\n\n"


def said(events: list[tuple[str | None, bytes]]) -> list[int]:
    """The numbers of the log messages among a stream's events."""
    return [orjson.loads(data)["params"]["data"] for _, data in events if data]


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Targets asked again at once (the pauses are for real targets)."""
    monkeypatch.setattr(get_stream, "REOPEN_PAUSES", (0.0, 0.0, 0.0))
    monkeypatch.setattr(fanout, "STREAM_BUSY_PAUSES", (0.0, 0.0))


async def listened(app, headers: Headers, targets: Targets, last: str | None = None) -> list:
    """One GET stream, left by the client once the targets' streams were relayed."""
    streamed, gone = asyncio.Event(), asyncio.Event()
    targets.streamed = streamed
    sent = headers + ([(b"last-event-id", last.encode())] if last is not None else [])
    stream = asyncio.ensure_future(drive(app, "GET", headers=sent, client_left=gone))
    await streamed.wait()
    gone.set()
    response = await stream
    assert response.status == 200, response.body
    return sse(response.body)


async def test_a_client_resuming_gets_what_it_missed_then_the_live_stream():
    targets = Targets(streams={"a": [note(1), note(2)]}, holding=True)
    app = stage(targets)
    headers = await open_session(app)
    first = await listened(app, headers, targets)
    assert said(first) == [1, 2]
    ids = [kept for kept, _ in first]
    assert all(ids)
    assert len(set(ids)) == 2
    # The client had only the first event: the second comes back under its id, then the live
    # stream under new ones.
    resumed = await listened(app, headers, targets, last=ids[0])
    assert resumed[0] == first[1]
    assert said(resumed[1:]) == [1, 2]
    assert not {kept for kept, _ in resumed[1:]} & set(ids)
    # From its last id: nothing missed, the live stream only.
    latest = resumed[-1][0]
    assert latest is not None
    assert said(await listened(app, headers, targets, last=latest)) == [1, 2]


@pytest.mark.parametrize("forged", ["deadbeef:1-1", "1-1", "", "x" * 300, "{s}:99999-0"])
async def test_another_sessions_id_or_a_forged_one_starts_from_now_with_a_priming_event(forged):
    targets = Targets(streams={"a": [note(1), note(2)]}, holding=True, version="2025-11-25")
    app = stage(targets)
    theirs, mine = await open_session(app), await open_session(app)
    their_events = await listened(app, theirs, targets)
    # A new stream primes its client: an id and no data, then the events.
    assert their_events[0][0] is not None
    assert their_events[0][1] == b""
    assert said(their_events) == [1, 2]
    mine_first = await listened(app, mine, targets)
    session_tag = mine_first[0][0].split(":")[0]
    for last in (their_events[1][0], their_events[0][0], forged.format(s=session_tag)):
        got = await listened(app, mine, targets, last=last)
        # Started from now: primed anew (nothing replayed), then the live events only.
        assert got[0][1] == b""
        assert got[0][0] not in {kept for kept, _ in their_events}
        assert said(got) == [1, 2]


async def test_a_client_resuming_takes_over_the_stream_it_left_open():
    targets = Targets(streams={"a": [note(1)]}, holding=True)
    app = stage(targets)
    headers = await open_session(app)
    last = (await listened(app, headers, targets))[-1][0]
    assert last is not None
    # A stream the client left, and the gateway has not noticed yet.
    streamed, never = asyncio.Event(), asyncio.Event()
    targets.streamed = streamed
    left_open = asyncio.ensure_future(drive(app, "GET", headers=headers, client_left=never))
    await streamed.wait()
    # A GET naming no id of the session is refused while it is open; one resuming takes over.
    assert (await drive(app, "GET", headers=headers)).status == 409
    forged = [*headers, (b"last-event-id", b"deadbeef:1-1")]
    assert (await drive(app, "GET", headers=forged)).status == 409
    resumed = await listened(app, headers, targets, last=last)
    assert said(resumed) == [1, 1]  # the event the old stream sent, then the live one
    old = await left_open
    assert old.status == 200
    assert said(sse(old.body)) == [1]
    # Each target stream of the old one was released.
    assert all(get.released for get in targets.gets)


def last_event_ids(targets: Targets, name: str) -> list[bytes | None]:
    """The `Last-Event-ID` of each GET `name` was sent (None: none)."""
    return [dict(h).get(b"last-event-id") for n, h, m in targets.seen if n == name and not m]


async def test_a_targets_stream_is_resumed_from_its_own_id_when_the_client_resumes():
    targets = Targets(
        streams={"a": [note(1, "t-1"), note(2, "t-2")], "b": [note(10)]},
        holding=True,
        resumable={"a"},
    )
    app = stage(targets)
    headers = await open_session(app)
    first = await listened(app, headers, targets)
    assert sorted(said(first)) == [1, 2, 10]
    # While no stream is open, target a sends a third event (it keeps its events).
    targets.streams["a"].append(note(3, "t-3"))
    resumed = await listened(app, headers, targets, last=first[-1][0])
    # a sends what came after the last event the gateway took from it; b, keeping no ids,
    # starts from now.
    assert sorted(said(resumed)) == [3, 10]
    assert last_event_ids(targets, "a") == [None, b"t-2"]
    assert last_event_ids(targets, "b") == [None, None]
    # A stream not resumed starts every target's from now.
    await listened(app, headers, targets)
    assert last_event_ids(targets, "a")[-1] is None


async def test_a_targets_id_unsafe_in_a_header_is_never_sent_back():
    targets = Targets(streams={"a": [note(1, "t 1")]}, holding=True, resumable={"a"})
    app = stage(targets)
    headers = await open_session(app)
    first = await listened(app, headers, targets)
    await listened(app, headers, targets, last=first[-1][0])
    assert last_event_ids(targets, "a") == [None, None]


async def test_a_target_still_holding_the_previous_stream_is_asked_again():
    targets = Targets(streams={"a": [note(1)]}, holding=True, busy={"a": 2})
    app = stage(targets)
    headers = await open_session(app)
    assert said(await listened(app, headers, targets)) == [1]
    assert len(last_event_ids(targets, "a")) == 3
    # Past the tries, the target is left out of the stream (here: the only one, so 405).
    targets.busy["a"] = 10
    assert (await drive(app, "GET", headers=headers)).status == 405


async def test_a_targets_stream_that_ends_after_giving_ids_is_asked_again_from_its_id():
    targets = Targets(streams={"a": [note(1, "t-1"), note(2, "t-2")]}, resumable={"a"})
    app = stage(targets)
    headers = await open_session(app)
    response = await drive(app, "GET", headers=headers)
    # Asked again from its last id until it had nothing more, a few times; then the client's
    # stream ends with the targets'.
    assert said(sse(response.body)) == [1, 2]
    asked = last_event_ids(targets, "a")
    assert asked == [None] + [b"t-2"] * get_stream.MAX_QUIET_REOPENS
    # Each of the target's streams was released once.
    assert [get.released for get in targets.gets] == [1] * len(asked)


async def test_a_target_priming_its_answers_is_opened_and_called():
    """SDK servers that keep their events start each answer's stream with a priming event (an
    id, empty data): no message, skipped."""
    targets = Targets(priming=True, version="2025-11-25")
    app = stage(targets)
    headers = await open_session(app)
    assert [name for name, _, m in targets.seen if m.get("method") == "initialize"] == ["a", "b"]
    listed = await drive(app, "POST", headers=headers, body=rpc("tools/list"))
    names = [tool["name"] for tool in listed.json()["result"]["tools"]]
    assert names == ["a_t1", "a_t2", "b_u1", "b_u2"]
