"""A session's exchanges shared by two replicas' copies of it through a real Redis: a target's
request minted at one is answered at the other, once, whoever races for it; the copies mint
different ids; a request the target withdraws on a stream the other replica relays is known
there; a client's request in flight at one is cancelled, and its progress passed, at the other;
and a request Redis did not take is answered only where it was minted."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest

from mcp_oauth_gateway.proxy.federation.exchange import Exchanges
from mcp_oauth_gateway.proxy.federation.rewrite import from_target
from mcp_oauth_gateway.proxy.federation.shared import SharedSessions
from mcp_oauth_gateway.redis_clients import RedisConnection
from support import free_port


@pytest.fixture
async def copies(redis_url: str) -> AsyncIterator[tuple[Exchanges, Exchanges]]:
    """One session's exchanges at two replicas (each its own connection)."""
    route = f"default/exchanges-{secrets.token_hex(4)}"
    stores = [SharedSessions(RedisConnection(redis_url), route, 0) for _ in range(2)]
    session = secrets.token_urlsafe(16)
    pair = (Exchanges(), Exchanges())
    for exchanges, store in zip(pair, stores, strict=True):
        exchanges.share(store, session)
    try:
        yield pair
    finally:
        for store in stores:
            await store.connection.close()


def cancelled(own_id: object) -> dict[str, object]:
    params = {"requestId": own_id, "reason": "timeout"}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


async def test_a_request_minted_at_one_replica_is_taken_once_at_either(copies):
    one, two = copies
    minted = one.ask("a", "r-1")
    await one.settle()
    assert minted != two.ask("a", "r-1")  # each copy mints under its own tag
    found = await asyncio.gather(two.take(minted), one.take(minted), two.take(minted))
    assert [f for f in found if f is not None] == [("a", "r-1")]


async def test_a_request_withdrawn_on_the_other_replicas_stream_is_known_there(copies):
    one, two = copies
    minted = one.ask("a", 7)
    await one.settle()
    await two.recall("a", 7)
    assert from_target(cancelled(7), "a", two) == cancelled(minted)
    await two.settle()
    assert await one.take(minted) is None
    # Another target's request under the same own id is another request.
    await two.recall("b", 7)
    assert from_target(cancelled(7), "b", two) is None


async def test_a_client_request_in_flight_at_one_replica_is_known_at_the_other(copies):
    one, two = copies
    one.start("c-1", ("b",), progress="tok")
    await one.settle()
    assert await two.cancelled("c-1") == ("b",)
    assert await two.cancelled("c-2") == ()
    assert await two.progress_elsewhere("b", "tok")
    assert not await two.progress_elsewhere("a", "tok")
    assert not await two.progress_elsewhere("b", "other")
    one.finish("c-1")
    await one.settle()
    assert await two.cancelled("c-1") == ()
    assert not await two.progress_elsewhere("b", "tok")


async def test_a_request_redis_did_not_take_is_answered_only_where_it_was_minted():
    unreachable = RedisConnection(f"redis://127.0.0.1:{free_port()}/0")
    down = SharedSessions(unreachable, "default/down", 0)
    try:
        here, there = Exchanges(), Exchanges()
        here.share(down, "s")
        there.share(down, "s")
        minted = here.ask("a", 1)
        await here.settle()
        assert await there.take(minted) is None
        assert await here.take(minted) == ("a", 1)
        assert await here.take(minted) is None
    finally:
        await down.connection.close()
