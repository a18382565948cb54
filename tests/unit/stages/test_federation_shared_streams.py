"""What two replicas of a federated route rule share through a real Redis beyond the sessions
themselves: the client's GET stream resumed at the other replica (what it missed, its targets'
streams from their own ids), a cancellation reaching the target of a call running at the other
replica, the session limits counted across both, the targets' health merged, and a session
refused (503, Retry-After) when Redis cannot count it."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import orjson
import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY
from mcp_oauth_gateway.proxy.federation import get_stream
from mcp_oauth_gateway.proxy.federation.session import SessionTable
from mcp_oauth_gateway.proxy.federation.shared import SharedSessions
from mcp_oauth_gateway.proxy.federation.stage import Federation, FederationState
from mcp_oauth_gateway.redis_clients import RedisConnection
from support import free_port

from .federation_targets import ALICE, INIT, Targets, opened, rpc, sse, stage
from .harness import drive

Pair = tuple[Federation, Federation, Targets]


def note(n: int, own_id: str) -> bytes:
    params = {"level": "info", "data": n}
    message = {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
    return f"id: {own_id}\n".encode() + b"data: " + orjson.dumps(message) + b"\n\n"


def said(events: list[tuple[str | None, bytes]]) -> list[int]:
    return [orjson.loads(data)["params"]["data"] for _, data in events if data]


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(get_stream, "REOPEN_PAUSES", (0.0, 0.0, 0.0))


async def pair(
    redis_url: str, targets: Targets, tables: tuple[SessionTable, SessionTable] | None = None
) -> AsyncIterator[Pair]:
    route = f"default/streams-{secrets.token_hex(4)}"
    shared = [SharedSessions(RedisConnection(redis_url), route, 0) for _ in range(2)]
    tables = tables or (SessionTable(), SessionTable())
    states = [FederationState(sessions=t, shared=s) for t, s in zip(tables, shared, strict=True)]
    try:
        yield stage(targets, state=states[0]), stage(targets, state=states[1]), targets
    finally:
        for store in shared:
            await store.connection.close()


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[Pair]:
    targets = Targets(holding=True, resumable={"a"}, version="2025-11-25")
    targets.streams = {"a": [note(1, "t-1"), note(2, "t-2")]}
    async for made in pair(redis_url, targets):
        yield made


async def listened(app, headers, targets: Targets, last: str | None = None) -> list:
    streamed, gone = asyncio.Event(), asyncio.Event()
    targets.streamed = streamed
    sent = headers + ([(b"last-event-id", last.encode())] if last is not None else [])
    stream = asyncio.ensure_future(drive(app, "GET", headers=sent, client_left=gone, scope=ALICE))
    await streamed.wait()
    gone.set()
    response = await stream
    assert response.status == 200, response.body
    return sse(response.body)


async def test_a_stream_left_at_one_replica_is_resumed_at_the_other(replicas):
    one, two, targets = replicas
    headers = await opened(one)
    first = await listened(one, headers, targets)
    assert first[0][1] == b""  # primed
    assert said(first) == [1, 2]
    targets.streams["a"].append(note(3, "t-3"))  # sent while no stream was open
    # The client had the first event only: the second comes back under its id, then what a
    # sent meanwhile, from its own id.
    resumed = await listened(two, headers, targets, last=first[1][0])
    assert resumed[0] == first[2]
    assert said(resumed) == [2, 3]
    gets = [dict(h).get(b"last-event-id") for n, h, m in targets.seen if n == "a" and not m]
    assert gets == [None, b"t-2"]
    # Resumed again at the first replica, after the last event the client had.
    back = await listened(one, headers, targets, last=resumed[-1][0])
    assert said(back) == []


async def test_an_id_of_another_session_resumes_nothing_at_either_replica(replicas):
    one, two, targets = replicas
    theirs, mine = await opened(one), await opened(two)
    their_events = await listened(one, theirs, targets)
    for app in (one, two):
        got = await listened(app, mine, targets, last=their_events[1][0])
        assert got[0][1] == b""  # primed anew: from now
        assert said(got) == [1, 2]


async def test_a_cancellation_at_one_replica_reaches_the_call_running_at_the_other(redis_url):
    started, gone = asyncio.Event(), asyncio.Event()
    async for one, two, targets in pair(redis_url, Targets(waiting=started)):
        headers = await opened(one)
        call = rpc("tools/call", "c-1", name="b_wait")
        running = asyncio.ensure_future(
            drive(one, "POST", headers=headers, body=call, client_left=gone, scope=ALICE)
        )
        await started.wait()
        cancel = {"requestId": "c-1", "reason": "user"}
        note_ = orjson.dumps(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
        )
        assert (await drive(two, "POST", headers=headers, body=note_, scope=ALICE)).status == 202
        cancelled = [n for n, _, m in targets.seen if m.get("method") == "notifications/cancelled"]
        assert cancelled == ["b"]
        gone.set()
        await running
        # Finished: a cancellation at either replica reaches no target now.
        for app in (one, two):
            assert (
                await drive(app, "POST", headers=headers, body=note_, scope=ALICE)
            ).status == 202
        methods = [m.get("method") for _, _, m in targets.seen]
        assert methods.count("notifications/cancelled") == 1


async def test_a_callers_sessions_are_counted_across_replicas(redis_url):
    small = (SessionTable(per_owner=2), SessionTable(per_owner=2))
    async for one, two, _ in pair(redis_url, Targets(), small):
        first = await opened(one)
        second = await opened(two)
        await opened(two)  # the third: the caller's first (idle the longest) is pushed out
        for app in (one, two):
            gone = await drive(app, "POST", headers=first, body=rpc("tools/list"), scope=ALICE)
            assert gone.status == 404
            kept = await drive(app, "POST", headers=second, body=rpc("tools/list"), scope=ALICE)
            assert kept.status == 200
        # Another caller's sessions are counted apart.
        bob = {CLAIMS_KEY: {"iss": "https://idp", "sub": "bob"}}
        for _ in range(2):
            await opened(one, bob)
        kept = await drive(one, "POST", headers=second, body=rpc("tools/list"), scope=ALICE)
        assert kept.status == 200


async def test_the_rules_limit_is_counted_across_replicas_too(redis_url):
    small = (SessionTable(limit=2), SessionTable(limit=2))
    async for one, two, _ in pair(redis_url, Targets(), small):
        first = await opened(one)
        await opened(two)
        await opened(two, {})  # an anonymous caller counts in the rule's limit
        for app in (one, two):
            gone = await drive(app, "POST", headers=first, body=rpc("tools/list"), scope=ALICE)
            assert gone.status == 404


async def test_the_targets_health_is_merged_across_replicas(redis_url):
    async for one, two, targets in pair(redis_url, Targets()):
        headers = await opened(one)
        targets.down.add("b")
        listed = await drive(one, "POST", headers=headers, body=rpc("tools/list"), scope=ALICE)
        assert listed.status == 200
        for app in (one, two):
            await app.health.refresh(["a", "b"])
        seen = [(app.health.shown("a").view(), app.health.shown("b").view()) for app in (one, two)]
        assert seen[0] == seen[1]
        a, b = seen[1]
        assert a["up"] is True
        assert a["failures"] == {}
        assert b["up"] is False
        assert b["failures"] == {"unreachable": 1}
        # Replica two saw nothing itself: its own (the metrics') view is empty.
        assert two.health.of("b").up is None
        targets.down.clear()
        await drive(two, "POST", headers=headers, body=rpc("tools/list", 2), scope=ALICE)
        # The replica that saw it reports it first (its report is on its way), then any reads.
        for app in (two, one):
            await app.health.refresh(["a", "b"])
        assert one.health.shown("b").up is True
        assert one.health.shown("b").failures == {"unreachable": 1}


async def test_a_new_session_is_refused_when_redis_cannot_count_it():
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    shared = SharedSessions(RedisConnection(unreachable), "default/down", 0)
    try:
        targets = Targets()
        app = stage(targets, state=FederationState(shared=shared))
        response = await drive(app, "POST", body=INIT, scope=ALICE)
        assert response.status == 503
        assert response.header(b"retry-after") == b"2"
        assert response.json()["error"] == "temporarily_unavailable"
        assert "Redis" in response.json()["error_description"]
        assert response.header(b"mcp-session-id") is None
    finally:
        await shared.connection.close()
