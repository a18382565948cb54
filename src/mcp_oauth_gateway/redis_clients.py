"""The asyncio Redis client for a `RedisTarget`: one server from its URL, a Sentinel set's
current primary (found again after a failover), or a Cluster (slots, `MOVED` and `ASK`
followed by redis-py). The one place the gateway opens a Redis connection."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel

from .redis_targets import RedisTarget

# Seconds a command, or a connection, may take before it fails (a dead primary must not hang a
# request; Sentinel needs a few seconds to promote a replica).
SOCKET_TIMEOUT = 5.0


def client_for(target: RedisTarget, **options: Any) -> Redis | RedisCluster:
    """A client for `target` (`options`: redis-py's, e.g. `decode_responses`)."""
    timeouts = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_TIMEOUT,
        **options,
    }
    if target.kind == "single":
        return Redis.from_url(target.url, **timeouts)
    credentials: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.kind == "cluster":
        nodes = [ClusterNode(host, port) for host, port in target.nodes]
        return RedisCluster(startup_nodes=nodes, ssl=target.tls, **credentials, **timeouts)
    sentinel_options: dict[str, Any] = {
        "socket_timeout": timeouts["socket_timeout"],
        "socket_connect_timeout": timeouts["socket_connect_timeout"],
        "ssl": target.tls,
    }
    if target.sentinel_password is not None:
        sentinel_options["password"] = target.sentinel_password
    sentinel = Sentinel(list(target.nodes), sentinel_kwargs=sentinel_options)
    assert target.service is not None  # a Sentinel URL names its service
    primary: Redis = sentinel.master_for(
        target.service, db=target.db, ssl=target.tls, **credentials, **timeouts
    )
    return primary
