"""Critical writes acknowledged by a replica (issue 37), against real Redis as operators run it on
loopback: a Sentinel set and a six-node Cluster. A write no replica has is refused (and a take
given back), never reported done; what was acknowledged survives the primary's death; a
refresh token rotated before a failover is still recognised as reused after it; users' grants
live on a Cluster's slots with each user's keys together."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from conftest import write_example
from mcp_oauth_gateway.broker.refresh import RefreshReused, RefreshTokens
from mcp_oauth_gateway.broker.store import RedisStore as BrokerRedisStore
from mcp_oauth_gateway.redis_clients import RedisConnection, RedisUnavailable
from mcp_oauth_gateway.usertokens.grants import Grant, GrantKey
from mcp_oauth_gateway.usertokens.keys import TokenKeys
from mcp_oauth_gateway.usertokens.locking import StoreError
from mcp_oauth_gateway.usertokens.redis_store import RedisStore as GrantRedisStore
from redis_ha_support import (
    CLUSTER_PASSWORD,
    SERVER_PASSWORD,
    RedisClusterSet,
    SentinelSet,
    redis_cluster,
    sentinel_set,
)
from support import Process


def grant(token: str) -> Grant:
    """A user's upstream grant holding `token`."""
    return Grant(token, None, "Bearer", None, None, "https://upstream", 1.0)


@contextmanager
def stopped(process: Process) -> Iterator[None]:
    """`process` hung (SIGSTOP) for the block: connected, answering nothing."""
    os.kill(process.popen.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.popen.pid, signal.SIGCONT)


async def until_acknowledged(connection: RedisConnection, key: str) -> None:
    """Wait until a write on `key`'s slot is acknowledged (a replica caught up)."""
    async with asyncio.timeout(60):
        while True:
            try:
                await connection.acknowledged(key, lambda pipe: pipe.set(key, b"probe"))
                return
            except RedisUnavailable:
                await asyncio.sleep(0.1)


@pytest.fixture
def sentinels(logs, tmp_path) -> Iterator[SentinelSet]:
    # Two replicas: after the primary dies, the one not promoted acknowledges the new one.
    with sentinel_set(logs, tmp_path / "sentinel", replicas=2) as running:
        yield running


@pytest.fixture
async def sentinel_connection(sentinels) -> AsyncIterator[RedisConnection]:
    connection = RedisConnection(sentinels.url + "&ack_timeout_ms=300")
    await until_acknowledged(connection, "probe")
    yield connection
    await connection.close()


async def test_a_write_no_replica_acknowledges_is_refused_and_a_take_given_back(
    sentinels, sentinel_connection
):
    store = BrokerRedisStore(sentinel_connection)
    await store.put("code", "c1", {"client_id": "a"}, 60)
    with stopped(sentinels.replica), stopped(sentinels.others[0]):
        with pytest.raises(RedisUnavailable) as refused:
            await store.take("code", "c1")
        assert "0 of the 1 replicas" in str(refused.value)
        assert "server-pw" not in str(refused.value)
        assert sentinel_connection.up is False
        with pytest.raises(RedisUnavailable):
            await store.put("code", "c2", {"client_id": "a"}, 60)
    # The code the caller was refused stands again: trying again redeems it, once.
    await until_acknowledged(sentinel_connection, "probe")
    assert await store.take("code", "c1") == {"client_id": "a"}
    assert await store.take("code", "c1") is None


async def test_a_rotated_refresh_token_is_still_reuse_after_the_primary_dies(
    sentinels, sentinel_connection
):
    refresh = RefreshTokens(BrokerRedisStore(sentinel_connection))
    issued = await refresh.issue("client", {"access_token": "a1", "refresh_token": "p1"})
    grant = await refresh.take(issued["refresh_token"])
    assert grant is not None
    rotated = await refresh.rotate(grant, {"access_token": "a2", "refresh_token": "p2"})
    sentinels.primary.popen.kill()  # every write above was acknowledged by the replica

    async def reused() -> bool:
        try:
            await refresh.take(issued["refresh_token"])
        except RefreshReused:
            return True
        except (RedisUnavailable, RedisError, OSError):
            await asyncio.sleep(0.1)  # the sentinels are promoting the replica
            return False
        raise AssertionError("the rotated-away token was not recognised after the failover")

    async with asyncio.timeout(60):
        while not await reused():
            pass
    # Reuse revoked the family: the token handed out at the rotation is gone too.
    assert await refresh.take(rotated["refresh_token"]) is None


@pytest.fixture
def cluster(logs, tmp_path) -> Iterator[RedisClusterSet]:
    with redis_cluster(logs, tmp_path / "cluster") as running:
        yield running


@pytest.fixture
async def cluster_connection(cluster) -> AsyncIterator[RedisConnection]:
    connection = RedisConnection(cluster.url + "?ack_timeout_ms=300")
    for n in range(12):  # a key on each primary, each with a replica in sync
        await until_acknowledged(connection, f"probe-{n}")
    yield connection
    await connection.close()


async def test_a_cluster_write_waits_for_the_replica_of_its_own_key(cluster, cluster_connection):
    client = cluster_connection.client
    key = "critical"
    await client.set(key, b"x")
    primary = client.get_node_from_key(key)
    assert primary is not None
    async with Redis(port=int(primary.port), password=CLUSTER_PASSWORD) as direct:
        role = await direct.execute_command("ROLE")
    (replica_port,) = [int(replica[1]) for replica in role[2]]
    process = next(
        p for p, port in zip(cluster.processes, cluster.ports, strict=True) if port == replica_port
    )
    with stopped(process):
        # The default node's replica answers WAIT; only the key's own may acknowledge it.
        with pytest.raises(RedisUnavailable, match="0 of the 1 replicas"):
            await cluster_connection.acknowledged(key, lambda pipe: pipe.set(key, b"y"))
        others = [n for n in range(40) if client.get_node_from_key(f"k{n}") != primary]
        other = f"k{others[0]}"
        assert await cluster_connection.acknowledged(other, lambda pipe: pipe.set(other, b"z"))


async def test_users_grants_live_on_a_cluster_each_user_s_keys_on_one_slot(cluster_connection):
    old, new = secrets.token_bytes(32), secrets.token_bytes(32)
    store = GrantRedisStore(cluster_connection.url, TokenKeys.of([old]), cluster_connection)
    users = [GrantKey("https://idp", f"user-{n}", backend) for n in range(8) for backend in "ab"]
    for key in users:
        await store.put(key, grant("token-" + key.subject))
    slots = {
        cluster_connection.client.keyslot(store.names.user("https://idp", f"user-{n}"))
        for n in range(8)
    }
    assert len(slots) > 1, "users are spread over the cluster"
    for key in users:
        user_slot = cluster_connection.client.keyslot(store.names.user(key.issuer, key.subject))
        assert cluster_connection.client.keyslot(store.names.grant(key)) == user_slot
    listed = await store.list_user("https://idp", "user-3")
    assert [s.key.backend for s in listed] == ["a", "b"]
    assert len(await store.list_all()) == 16
    assert await store.delete_user("https://idp", "user-3") == 2
    assert await store.get(GrantKey("https://idp", "user-3", "a")) is None
    assert (await store.get(GrantKey("https://idp", "user-4", "a"))) is not None
    # A new sealing key: every grant, on whichever slot, sealed anew (WATCH on its node).
    rotated = GrantRedisStore(cluster_connection.url, TokenKeys.of([new, old]), cluster_connection)
    assert await rotated.reseal() == 14
    only_new = GrantRedisStore(cluster_connection.url, TokenKeys.of([new]), cluster_connection)
    assert (
        await only_new.get(GrantKey("https://idp", "user-4", "b"))
    ).access_token == "token-user-4"


async def test_a_grant_store_write_no_replica_has_is_a_store_error(sentinels, sentinel_connection):
    store = GrantRedisStore(
        sentinel_connection.url, TokenKeys.of([secrets.token_bytes(32)]), sentinel_connection
    )
    key = GrantKey("https://idp", "alice", "a")
    await store.put(key, grant("t"))
    with (
        stopped(sentinels.replica),
        stopped(sentinels.others[0]),
        pytest.raises(StoreError, match="0 of the 1 replicas"),
    ):
        await store.put(key, grant("t2"))


def check_redis_lines(config: Path, url: str) -> list[str]:
    """`check`'s lines about Redis with `url` as the environment's Redis."""
    done = subprocess.run(
        [sys.executable, "-m", "mcp_oauth_gateway", "check", "-f", str(config), "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MCP_OAUTH_GATEWAY_REDIS_URL": url},
        check=False,
    )
    assert SERVER_PASSWORD not in done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("redis ")]


async def test_check_says_whether_critical_writes_would_be_acknowledged(
    sentinels, sentinel_connection, tmp_path
):
    config = write_example("provider-b", tmp_path / "cfg", {})
    url = sentinels.url + "&ack_timeout_ms=300"
    (line,) = await asyncio.to_thread(check_redis_lines, config, url)
    assert line.endswith("(MCP_OAUTH_GATEWAY_REDIS_URL): ok, writes acknowledged by 1 replica(s)")
    assert line.startswith("redis redis+sentinel://***@127.0.0.1:")
    with stopped(sentinels.replica), stopped(sentinels.others[0]):
        (line,) = await asyncio.to_thread(check_redis_lines, config, url)
    assert "FAILED: a write reached 0 of the 1 replicas it needs within 300 ms" in line


async def test_check_probes_every_primary_of_a_cluster(cluster, cluster_connection, tmp_path):
    config = write_example("provider-b", tmp_path / "cfg", {})
    (line,) = await asyncio.to_thread(check_redis_lines, config, cluster.url)
    assert line.endswith("ok, writes acknowledged by 1 replica(s)"), line
