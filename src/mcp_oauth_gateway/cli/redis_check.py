"""`check`'s look at every Redis the configuration names (the Broker's, rate limits', the
environment's, the user-token store): reached as the gateway will reach it, and a critical
write acknowledged by as many replicas as its URL asks for, on every primary of a Cluster. A
Sentinel set whose replicas are gone, say, is told before sign-ins answer 503."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Callable

from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from ..controlplane import Snapshot
from ..redis_clients import RedisConnection, RedisUnavailable
from .common import REDIS_ENV

# What the probes write: a random key under the gateway's prefix, gone after ten seconds.
PROBE = "mcp-oauth-gateway:check:"


def redis_urls(snapshot: Snapshot, store_url: str | None) -> list[tuple[str, str]]:
    """(where it is named, URL) of each distinct Redis, in a stable order."""
    named: dict[str, str] = {}
    environment = os.environ.get(REDIS_ENV)
    if environment:
        named.setdefault(environment, REDIS_ENV)
    policies = [r.policy for routes in snapshot.listeners.values() for r in routes if r.policy]
    for policy in policies:
        if policy.mcp is not None and policy.mcp.redis_url:
            named.setdefault(policy.mcp.redis_url, f"GatewayPolicy {policy.key} broker.redisUrl")
        limit = policy.rate_limit
        if limit is not None and limit.redis_url:
            named.setdefault(limit.redis_url, f"GatewayPolicy {policy.key} rateLimit.redisUrl")
    if store_url is not None and not store_url.startswith("sqlite:"):
        named.setdefault(store_url, "--user-token-store")
    return [(where, url) for url, where in named.items()]


async def check_redis(urls: list[tuple[str, str]], limit: float) -> list[dict[str, object]]:
    """Each Redis: where it is named, its URL without passwords, and what failed (or None)."""
    return list(await asyncio.gather(*(_one(where, url, limit) for where, url in urls)))


async def _one(where: str, url: str, limit: float) -> dict[str, object]:
    entry: dict[str, object] = {"where": where, "redis": "***", "acks": 0, "error": None}
    try:
        connection = RedisConnection(url, where)
    except ValueError as exc:
        entry["error"] = str(exc)
        return entry
    entry.update(redis=connection.shown, kind=connection.target.kind, acks=connection.acks)
    try:
        async with asyncio.timeout(limit + connection.target.ack_timeout_ms / 1000):
            for key in await _probe_keys(connection):
                await connection.acknowledged(key, _probe(key))
    except RedisUnavailable as exc:
        entry["error"] = exc.reason
    except (RedisError, OSError) as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
    except TimeoutError:
        entry["error"] = f"no answer within {limit:g} s"
    finally:
        await connection.close()
    return entry


def _probe(key: str) -> Callable[[Pipeline], object]:
    """The probe write on `key`."""
    return lambda pipe: pipe.set(key, 1, px=10_000)


async def _probe_keys(connection: RedisConnection) -> list[str]:
    """One key per primary: a Cluster's each, by hash tags landing on each in turn."""
    client = connection.client
    token = secrets.token_hex(8)
    if not isinstance(client, RedisCluster):
        return [PROBE + token]
    await client.initialize()
    wanted = {node.name for node in client.get_primaries()}
    keys: dict[str, str] = {}
    for n in range(16_384):
        key = f"{PROBE}{{{token}-{n}}}"
        node = client.get_node_from_key(key)
        if node is not None and node.name in wanted and node.name not in keys:
            keys[node.name] = key
            if len(keys) == len(wanted):
                break
    return list(keys.values())
