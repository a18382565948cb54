"""Federated sessions shared across replicas through a real Redis: two Federation stages (two
replicas' worth: each its own session table and connection) over one redis-server. A session
opened at one is used at the other (its targets' sessions reused by id, a cursor going on),
stays its caller's only, ends everywhere, and is stored under the route rule's namespace with a
TTL and without the client's token; an answer to a target's request relayed by the other replica
reaches that target, once."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import orjson
import pytest
import redis.asyncio as redis

from mcp_oauth_gateway.asgi import CLAIMS_KEY
from mcp_oauth_gateway.proxy.federation.session import SessionTable
from mcp_oauth_gateway.proxy.federation.shared import SESSION_TTL, SharedSessions
from mcp_oauth_gateway.proxy.federation.stage import Federation, FederationState
from mcp_oauth_gateway.redis_clients import RedisConnection

from .federation_targets import ALICE, Targets, answer, events, opened, rpc, stage
from .harness import drive

BOB = {CLAIMS_KEY: {"iss": "https://idp", "sub": "bob"}}


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[Federation, Federation, Targets, str]]:
    """Two replicas of one route rule (a route name of its own per test) over the same targets."""
    route = f"default/shared-{secrets.token_hex(4)}"
    targets = Targets()
    states = [
        FederationState(shared=SharedSessions(RedisConnection(redis_url), route, 0))
        for _ in range(2)
    ]
    one, two = (stage(targets, state=state) for state in states)
    yield one, two, targets, route
    for state in states:
        assert state.shared is not None
        await state.shared.connection.close()


def methods(targets: Targets) -> list[object]:
    return [message.get("method") for _, _, message in targets.seen]


async def test_a_session_opened_at_one_replica_is_used_at_the_other(replicas):
    one, two, targets, _ = replicas
    headers = await opened(one)
    notified = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    assert (await drive(one, "POST", headers=headers, body=notified, scope=ALICE)).status == 202
    listed = await drive(two, "POST", headers=headers, body=rpc("tools/list"), scope=ALICE)
    assert listed.status == 200
    result = listed.json()["result"]
    assert [t["name"] for t in result["tools"]] == ["a_t1", "a_t2", "b_u1", "b_u2"]
    # The targets' sessions were reused by id: no second initialize.
    assert methods(targets).count("initialize") == 2
    sent = [dict(h) for name, h, m in targets.seen if m.get("method") == "tools/list"]
    assert sorted(h[b"mcp-session-id"] for h in sent) == [b"sess-a", b"sess-b"]
    assert {h[b"mcp-protocol-version"] for h in sent} == {b"2025-06-18"}
    # The next page at the first replica, with the second's cursor.
    page = rpc("tools/list", 2, cursor=result["nextCursor"])
    following = await drive(one, "POST", headers=headers, body=page, scope=ALICE)
    assert [t["name"] for t in following.json()["result"]["tools"]] == ["a_t3"]
    # A call at the second replica reaches its target under the target's own session.
    called = await drive(
        two, "POST", headers=headers, body=rpc("tools/call", 3, name="b_u1"), scope=ALICE
    )
    assert b'"by":"b"' in called.body
    assert dict(targets.seen[-1][1])[b"mcp-session-id"] == b"sess-b"


async def test_another_caller_does_not_reach_the_session_at_any_replica(replicas):
    one, two, targets, _ = replicas
    headers = await opened(one)
    before = len(targets.seen)
    for app, scope in ((two, BOB), (two, {}), (one, BOB)):
        response = await drive(app, "POST", headers=headers, body=rpc("tools/list"), scope=scope)
        assert response.status == 404
    assert len(targets.seen) == before
    # Its owner still has it, at either replica.
    for app in (two, one):
        response = await drive(app, "POST", headers=headers, body=rpc("tools/list"), scope=ALICE)
        assert response.status == 200


async def test_a_session_ended_at_one_replica_is_unknown_at_both(replicas):
    one, two, targets, _ = replicas
    headers = await opened(one)
    # The first replica holds its copy; the second ends the session.
    assert (await drive(two, "DELETE", headers=headers, scope=ALICE)).status == 204
    assert sorted(name for name, _ in targets.deleted) == ["a", "b"]
    for app in (one, two):
        response = await drive(app, "POST", headers=headers, body=rpc("tools/list"), scope=ALICE)
        assert response.status == 404


async def test_the_stored_session_is_namespaced_bounded_and_holds_no_token(replicas, redis_url):
    one, _, _, route = replicas
    headers = await opened(one)
    session_id = headers[0][1].decode()
    notified = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    assert (await drive(one, "POST", headers=headers, body=notified, scope=ALICE)).status == 202
    client = redis.Redis.from_url(redis_url)
    try:
        key = f"mcp-oauth-gateway:federation:{route}:0:session:{session_id}"
        raw = await client.get(key)
        assert raw is not None
        ttl = await client.ttl(key)
        assert 0 < ttl <= SESSION_TTL
        assert b"tok-not-for-redis" not in raw
        stored = orjson.loads(raw)
        assert stored["owner"] == ["https://idp", "alice"]
        assert stored["targets"] == {
            "a": {"session": "sess-a", "version": "2025-06-18"},
            "b": {"session": "sess-b", "version": "2025-06-18"},
        }
        assert stored["params"]["clientInfo"] == {"name": "t"}
        assert stored["initialized"] is True  # stored before the 202
        # Another rule of the same route has its own namespace.
        other = f"mcp-oauth-gateway:federation:{route}:1:session:{session_id}"
        assert not await client.exists(other)
    finally:
        await client.aclose()


async def test_an_answer_to_a_request_relayed_by_the_other_replica_reaches_its_target_once(
    replicas,
):
    one, two, targets, _ = replicas
    headers = await opened(one)
    called = await drive(
        one, "POST", headers=headers, body=rpc("tools/call", 7, name="b_ask"), scope=ALICE
    )
    asked = events(called.body)[0]
    assert asked["method"] == "sampling/createMessage"
    response = await drive(two, "POST", headers=headers, body=answer(asked["id"]), scope=ALICE)
    assert response.status == 202
    answers = [(n, m) for n, _, m in targets.seen if "result" in m]
    assert answers == [("b", orjson.loads(answer(0)))]
    # Taken once: neither replica takes it again, nor does another caller's session.
    for app in (one, two):
        again = await drive(app, "POST", headers=headers, body=answer(asked["id"]), scope=ALICE)
        assert again.status == 400
        assert "never sent the client" in again.json()["error"]["message"]
    assert len([m for _, _, m in targets.seen if "result" in m]) == 1


async def test_a_session_a_caller_pushes_out_ends_at_every_replica(redis_url):
    route = f"default/shared-{secrets.token_hex(4)}"
    shared = [SharedSessions(RedisConnection(redis_url), route, 0) for _ in range(2)]
    try:
        targets = Targets()
        small = FederationState(sessions=SessionTable(per_owner=1), shared=shared[0])
        one, two = (
            stage(targets, state=small),
            stage(targets, state=FederationState(shared=shared[1])),
        )
        first = await opened(one)
        await opened(one)  # pushes the first out: the caller holds one session at most
        response = await drive(two, "POST", headers=first, body=rpc("tools/list"), scope=ALICE)
        assert response.status == 404
    finally:
        for store in shared:
            await store.close()


async def test_a_target_opened_again_at_one_replica_is_used_so_at_the_other(replicas):
    """A replica holding a session takes the target session another replica opened again
    (its target had lost the old one), instead of sending the old id and opening yet another."""
    one, two, targets, _ = replicas
    headers = await opened(one)
    session_id = headers[0][1].decode()
    assert (
        await drive(two, "POST", headers=headers, body=rpc("tools/list"), scope=ALICE)
    ).status == 200
    # At the second replica, target a's session is opened again under a new id, and stored.
    held = await two.directory.find(session_id, ("https://idp", "alice"))
    assert held is not None
    held.targets["a"].session_id = b"sess-a-reopened"
    await two.directory.store(held)
    listed = await drive(one, "POST", headers=headers, body=rpc("tools/list", 2), scope=ALICE)
    assert listed.status == 200
    sent = [dict(h) for name, h, m in targets.seen if name == "a" and m.get("id") == 2]
    assert [h[b"mcp-session-id"] for h in sent] == [b"sess-a-reopened"]
    # Taken, not fought over: the first replica stores nothing back.
    assert methods(targets).count("initialize") == 2
