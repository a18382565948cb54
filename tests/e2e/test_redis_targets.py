"""The gateway's Redis client against Redis as operators run it (issue 37): a real Sentinel set
on loopback. The client follows the primary the sentinels name, also after the primary dies."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mcp_oauth_gateway.redis_clients import client_for
from mcp_oauth_gateway.redis_targets import parse_redis_url
from redis_ha_support import SentinelSet, sentinel_set


@pytest.fixture
def sentinels(logs, tmp_path) -> SentinelSet:
    with sentinel_set(logs, tmp_path / "sentinel") as running:
        yield running


async def test_a_sentinel_url_reaches_the_primary_and_follows_it_after_a_failover(sentinels):
    client = client_for(parse_redis_url(sentinels.url))
    try:
        await client.set("kept", "before")
        # Acknowledged by the replica before the primary goes: it survives the failover.
        assert await client.execute_command("WAIT", 1, 5000) == 1
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
