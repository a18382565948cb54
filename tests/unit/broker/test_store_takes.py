"""The Redis Broker store's take when Redis fails around it, on the session's real redis-server:
a take whose reply is lost (the primary ran it, replicated it and died) is the same take when the
request tries again, never "already used"; a take no replica acknowledged is undone with its
expiry, unless a newer value has been written since; no other take sees a taken value."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
from redis.asyncio.client import Pipeline

from mcp_oauth_gateway.broker.store import PREFIX, TAKEN, RedisStore
from mcp_oauth_gateway.redis_clients import RedisConnection, RedisUnavailable

REDIS_DB = 7


class Failing(RedisConnection):
    """Runs every exchange, then fails the next `lose` of them as Redis would: `replies` says
    whether the replies came back (a WAIT short of replicas) or were lost (a dead primary)."""

    lose = 0
    replies = False

    async def acknowledged(self, key: str, build: Callable[[Pipeline], object]) -> list[Any]:
        results = await super().acknowledged(key, build)
        if self.lose:
            self.lose -= 1
            raise RedisUnavailable(self.shown, "failed", results if self.replies else None)
        return results


@pytest.fixture
async def connection(redis_url: str) -> AsyncIterator[Failing]:
    url = redis_url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    failing = Failing(url)
    yield failing
    await failing.close()


def raw(connection: Failing, key: str) -> tuple[bytes | None, int]:
    """The code `key`'s stored bytes and milliseconds to live."""
    with redis.Redis.from_url(connection.url) as client:
        name = f"{PREFIX}code:{key}"
        value = client.get(name)
        return (value if isinstance(value, bytes) else None), int(client.pttl(name))


async def test_a_take_whose_reply_was_lost_is_the_same_take_when_tried_again(connection):
    store = RedisStore(connection)
    await store.put("code", "c1", {"client_id": "a"}, 600)
    connection.lose = 2  # two attempts run, their replies lost; the third answers
    assert await store.take("code", "c1") == {"client_id": "a"}
    assert await store.take("code", "c1") is None, "a second take found it"


async def test_a_taken_value_is_nothing_to_any_other_take(connection):
    store = RedisStore(connection)
    await store.put("code", "c1", {"client_id": "a"}, 600)
    assert await store.take("code", "c1") == {"client_id": "a"}
    value, _ = raw(connection, "c1")
    assert value is not None
    assert value.startswith(TAKEN)  # kept for the taker's retries
    assert await store.take("code", "c1") is None


async def test_a_take_no_replica_acknowledged_is_undone_with_its_expiry(connection):
    store = RedisStore(connection)
    await store.put("code", "c1", {"client_id": "a"}, 600)
    connection.lose, connection.replies = 1, True
    assert await store.take("code", "c1") == {"client_id": "a"}  # undone, then taken again
    await store.put("code", "c2", {"client_id": "b"}, 600)
    connection.lose = 100  # every attempt refused for PATIENCE: the caller gets 503
    with pytest.raises(RedisUnavailable):
        await store.take("code", "c2")
    value, ttl = raw(connection, "c2")
    assert value == b'{"client_id":"b"}'
    assert 590_000 < ttl <= 600_000, "the code came back with another expiry"


async def test_an_undone_take_leaves_a_value_written_or_taken_since(connection):
    store = RedisStore(connection)
    name = f"{PREFIX}code:c1"
    await store.put("code", "c1", {"client_id": "new"}, 600)
    await store._undo_take(name, "an-earlier-taker", [(600_000, b'{"client_id":"old"}')])
    assert await store.take("code", "c1") == {"client_id": "new"}
    # Now marked by that take: an earlier take's undo does not bring the old value back.
    await store._undo_take(name, "an-earlier-taker", [(600_000, b'{"client_id":"old"}')])
    assert await store.take("code", "c1") is None
