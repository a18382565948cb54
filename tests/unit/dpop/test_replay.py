"""One-time use of a proof's `jti` (`dpop/replay.py`, RFC 9449 §11.1): within the window a proof
is accepted once, in one process (bounded memory that refuses rather than forgets when full) and
across replicas through a real Redis (one fixed-size key per proof, expiring with the window)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis

from mcp_oauth_gateway.dpop import (
    DEFAULT_IAT_WINDOW,
    DpopError,
    MemoryReplayCache,
    Proof,
    RedisReplayCache,
    ReplayCacheFull,
    check_replay,
    replay_key,
    replay_ttl,
)
from mcp_oauth_gateway.redis_clients import RedisConnection, RedisUnavailable
from support import free_port

from .dpop_support import HTU, NOW, check, proof

WINDOW = DEFAULT_IAT_WINDOW


class Clock:
    """A clock the test moves (the cache's expiry, without waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def proof_of(jti: str = "jti-1", jkt: str = "jkt-1", htu: str = HTU, iat: float = NOW) -> Proof:
    return Proof(jkt=jkt, jti=jti, iat=iat, htm="POST", htu=htu, nonce=None, alg="ES256")


async def test_a_replayed_proof_is_refused_saying_why():
    cache = MemoryReplayCache()
    value = proof()
    await check_replay(cache, check(value), NOW, WINDOW)
    await check_replay(cache, check(proof()), NOW, WINDOW)  # another proof, another jti
    with pytest.raises(DpopError) as caught:
        await check_replay(cache, check(value), NOW + 1, WINDOW)
    assert caught.value.error == "invalid_dpop_proof"
    assert caught.value.description == (
        "this DPoP proof was used already (its jti); make a new proof, with a new jti, "
        "for every request"
    )


def test_the_key_is_fixed_size_and_names_key_jti_and_url():
    base = replay_key(proof_of())
    assert len(base) == 64
    assert len(replay_key(proof_of(jti="j" * 10_000))) == 64
    others = {
        replay_key(proof_of(jkt="jkt-2")),
        replay_key(proof_of(jti="jti-2")),
        replay_key(proof_of(htu="https://gw.example/other")),
        # No separator games: the parts are encoded, not concatenated.
        replay_key(proof_of(jkt="jkt-1jti-1", jti="")),
        replay_key(proof_of(jkt="jkt-1", jti='jti-1", "')),
    }
    assert base not in others
    assert len(others) == 5
    assert replay_key(proof_of(iat=NOW + 5)) == base  # the same proof whenever it is seen


def test_a_proof_is_remembered_until_its_iat_leaves_the_window():
    assert replay_ttl(proof_of(iat=NOW), NOW, WINDOW) == WINDOW + 1
    assert replay_ttl(proof_of(iat=NOW + WINDOW), NOW, WINDOW) == 2 * WINDOW + 1
    assert replay_ttl(proof_of(iat=NOW - WINDOW), NOW, WINDOW) == 1


async def test_memory_entries_expire_and_make_room():
    clock = Clock()
    cache = MemoryReplayCache(max_entries=2, clock=clock)
    assert await cache.first_use("a", 10)
    assert not await cache.first_use("a", 10)
    assert await cache.first_use("b", 20)
    with pytest.raises(ReplayCacheFull) as caught:
        await cache.first_use("c", 10)
    assert caught.value.retry_after == 10
    assert "holds 2 unexpired proofs, its limit" in str(caught.value)
    assert not await cache.first_use("a", 10), "a full cache still refuses replays"
    clock.now += 10
    assert await cache.first_use("a", 30), "the expired entry made room: `a` is new again"
    assert len(cache) == 2
    with pytest.raises(ReplayCacheFull) as caught:
        await cache.first_use("c", 10)
    assert caught.value.retry_after == 10, "until `b` expires"
    clock.now += 10
    assert await cache.first_use("c", 10)
    assert not await cache.first_use("a", 10), "`a`'s second entry lives on"


async def test_a_full_memory_cache_never_forgets_an_unexpired_proof():
    clock = Clock()
    cache = MemoryReplayCache(max_entries=100, clock=clock)
    for index in range(100):
        assert await cache.first_use(f"k{index}", 60 + index)
    for index in range(1000):
        with pytest.raises(ReplayCacheFull):
            await cache.first_use(f"new{index}", 60)
    for index in range(100):
        assert not await cache.first_use(f"k{index}", 60)


def test_a_cache_without_room_is_refused():
    with pytest.raises(ValueError, match="room for one entry"):
        MemoryReplayCache(max_entries=0)


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[RedisReplayCache, RedisReplayCache]]:
    """Two replicas' caches: each its own connection to the same Redis, a prefix per test."""
    prefix = f"test-dpop-{secrets.token_hex(4)}:"
    one, two = RedisConnection(redis_url), RedisConnection(redis_url)
    yield RedisReplayCache(one, prefix), RedisReplayCache(two, prefix)
    await one.close()
    await two.close()


async def test_a_proof_used_at_one_replica_is_refused_at_the_other(replicas):
    one, two = replicas
    value = proof()
    await check_replay(one, check(value), NOW, WINDOW)
    with pytest.raises(DpopError, match="was used already"):
        await check_replay(two, check(value), NOW, WINDOW)
    with pytest.raises(DpopError, match="was used already"):
        await check_replay(one, check(value), NOW, WINDOW)
    await check_replay(two, check(proof()), NOW, WINDOW)
    assert one.connection.up is True
    assert two.connection.up is True


async def test_redis_holds_one_short_fixed_key_per_proof_expiring_with_the_window(
    replicas, redis_url: str
):
    one, _ = replicas
    accepted = check(proof(jti="j" * 256, iat=NOW - 100))
    await check_replay(one, accepted, NOW, WINDOW)
    client = redis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=one.prefix + "*")]
        assert keys == [(one.prefix + replay_key(accepted)).encode()]
        assert 0 < await client.pttl(keys[0]) <= (WINDOW - 100 + 1) * 1000
    finally:
        await client.aclose()


async def test_a_redis_that_does_not_answer_refuses_the_proof():
    connection = RedisConnection(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(RedisUnavailable):
            await check_replay(RedisReplayCache(connection), check(proof()), NOW, WINDOW)
        assert connection.up is False
        assert connection.failures == 1
    finally:
        await connection.close()
