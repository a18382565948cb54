"""The gateway's Redis client against Redis as operators run it (issue 37), real servers on
loopback: a Sentinel set, whose primary the client follows also after it dies, and a six-node
Cluster, whose slots the client follows."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mcp_oauth_gateway.redis_clients import RedisConnection, client_for
from mcp_oauth_gateway.redis_targets import parse_redis_url
from redis_ha_support import (
    SENTINEL_PASSWORD,
    SERVICE,
    RedisClusterSet,
    SentinelSet,
    redis_cluster,
    sentinel_set,
)
from support import wait_until


@pytest.fixture
def sentinels(logs, tmp_path) -> SentinelSet:
    with sentinel_set(logs, tmp_path / "sentinel") as running:
        yield running


async def test_a_sentinel_url_reaches_the_primary_and_follows_it_after_a_failover(sentinels):
    client = client_for(parse_redis_url(sentinels.url))
    try:
        await client.set("kept", "before")
        # Acknowledged by the replica before the primary goes: it survives the failover. WAIT
        # by the second (the client gives up on a reply after 5 s): a replica still syncing
        # after its start acknowledges a later one.
        async with asyncio.timeout(60):
            while await client.execute_command("WAIT", 1, 1000) != 1:
                pass
        sentinels.primary.popen.kill()

        async def writes_again() -> bool:
            try:
                await client.set("after", "yes")
            except (RedisConnectionError, RedisTimeoutError):
                return False
            return True

        # Sentinel promotes the replica after its down-after time (1 s) and an election.
        async with asyncio.timeout(60):
            while not await writes_again():
                await asyncio.sleep(0.1)
        assert await client.get("kept") == b"before"
        assert await client.get("after") == b"yes"
        role = await client.execute_command("ROLE")
        assert role[0] == b"master"
    finally:
        await client.aclose()


def _named_by_every_sentinel(sentinels: SentinelSet) -> set[int]:
    named = set()
    for port in sentinels.sentinel_ports:
        with redis.Redis(port=port, password=SENTINEL_PASSWORD, socket_timeout=2) as sentinel:
            named.add(int(sentinel.sentinel_get_master_addr_by_name(SERVICE)[1]))
    return named


async def test_a_health_check_moves_the_pool_to_the_primary_the_sentinels_now_name(sentinels):
    # redis-py asks the sentinels only when it opens a connection: after a failover the old
    # primary is still alive and the pooled connection to it still answers (after a contested
    # failover it even takes writes). The gateway's health check asks, and closes it.
    connection = RedisConnection(sentinels.url)
    try:
        assert await connection.ping()
        port = lambda info: int(info["tcp_port"])  # noqa: E731
        assert port(await connection.client.info("server")) == sentinels.primary_port
        with redis.Redis(
            port=sentinels.sentinel_ports[0], password=SENTINEL_PASSWORD, socket_timeout=5
        ) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        await asyncio.to_thread(
            wait_until,
            lambda: _named_by_every_sentinel(sentinels) == {sentinels.replica_port},
            60,
            "every sentinel to name the replica",
        )
        assert await connection.ping()
        assert port(await connection.client.info("server")) == sentinels.replica_port
        assert (await connection.client.execute_command("ROLE"))[0] == b"master"
    finally:
        await connection.close()


async def test_a_wrong_sentinel_password_is_refused_naming_no_password(sentinels):
    url = sentinels.url.replace("sentinel_password=sentinel-pw", "sentinel_password=wrong")
    client = client_for(parse_redis_url(url))
    try:
        with pytest.raises(MasterNotFoundError) as refused:
            await asyncio.wait_for(client.ping(), 30)
        assert "wrong" not in str(refused.value)
        assert "server-pw" not in str(refused.value)
    finally:
        await client.aclose()


@pytest.fixture
def cluster(logs, tmp_path) -> RedisClusterSet:
    with redis_cluster(logs, tmp_path / "cluster") as running:
        yield running


async def test_a_cluster_url_reaches_every_slot_and_keeps_tagged_keys_together(cluster):
    client = client_for(parse_redis_url(cluster.url))
    try:
        # Keys spread over the three primaries: each is followed to its slot's node.
        for n in range(30):
            await client.set(f"key-{n}", n)
        assert [int(await client.get(f"key-{n}")) for n in range(30)] == list(range(30))
        # A hash tag keeps a multi-key operation on one slot.
        await client.mset({"{user:alice}:a": 1, "{user:alice}:b": 2})
        assert await client.mget("{user:alice}:a", "{user:alice}:b") == [b"1", b"2"]
        nodes = {client.get_node_from_key(f"key-{n}").port for n in range(30)}
        assert len(nodes) > 1
    finally:
        await client.aclose()
