"""The asyncio Redis client for a `RedisTarget`: one server from its URL, a Sentinel set's
current primary (found again after a failover), or a Cluster (slots, `MOVED` and `ASK`
followed by redis-py). The one place the gateway opens a Redis connection.

A write whose loss after a failover would hurt a user or open a hole (a refresh token's
rotation, a code redeemed, a revocation, a user's upstream grant) is *acknowledged*: its
commands and a `WAIT` go down one connection to the key's primary, and the write counts only
once `acks` replicas have it. Redis replicates asynchronously, so a write the primary took but
no replica has is lost when a replica is promoted; `WAIT` narrows that window to what Redis
itself does not promise (see docs/operations/redis.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import RedisError

from .redis_targets import RedisTarget, parse_redis_url

# Seconds a command, or a connection, may take before it fails (a dead primary must not hang a
# request; Sentinel needs a few seconds to promote a replica).
SOCKET_TIMEOUT = 5.0
# Seconds between health checks of each connection (/status, /readyz, metrics).
HEALTH_INTERVAL = 2.0
# What a client is told to wait before trying again while Redis fails over.
RETRY_AFTER = 2


class RedisUnavailable(Exception):
    """Redis did not answer, or a critical write lacks its replicas' acknowledgement: answer
    503 with `Retry-After`, and never act as if the write happened."""

    def __init__(self, shown: str, reason: str, results: list[Any] | None = None):
        super().__init__(f"Redis {shown}: {reason}")
        self.reason = reason
        self.retry_after = RETRY_AFTER
        # The commands' replies when they ran but were not acknowledged (to undo a take).
        self.results = results


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
    tls = tls_options(target)
    if target.kind == "cluster":
        nodes = [ClusterNode(host, port) for host, port in target.nodes]
        return RedisCluster(startup_nodes=nodes, **tls, **credentials, **timeouts)
    sentinel_options: dict[str, Any] = {
        "socket_timeout": timeouts["socket_timeout"],
        "socket_connect_timeout": timeouts["socket_connect_timeout"],
        **tls,
    }
    if target.sentinel_password is not None:
        sentinel_options["password"] = target.sentinel_password
    sentinel = Sentinel(list(target.nodes), sentinel_kwargs=sentinel_options)
    assert target.service is not None  # a Sentinel URL names its service
    primary: Redis = sentinel.master_for(
        target.service, db=target.db, **tls, **credentials, **timeouts
    )
    return primary


def tls_options(target: RedisTarget) -> dict[str, Any]:
    """redis-py's TLS options for a Sentinel set's or a Cluster's connections."""
    if not target.tls:
        return {"ssl": False}
    options: dict[str, Any] = {"ssl": True}
    if target.ca_file is not None:
        options["ssl_ca_certs"] = target.ca_file
    return options


class RedisConnection:
    """One Redis (by URL), shared by every user of it in the process, with its health as
    last seen by those users and by the health checks."""

    def __init__(self, url: str, where: str = "the Redis URL"):
        self.url = url
        self.target = parse_redis_url(url, where)
        self.shown = self.target.shown
        self.acks = self.target.acks
        self.client: Redis | RedisCluster = client_for(self.target)
        # Cluster only: a plain client per primary, for a write and its WAIT on one connection.
        self._nodes: dict[str, Redis] = {}
        self._stale_slots = False
        self.up: bool | None = None
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.last_ok_at: float | None = None
        self.failures = 0
        # Sentinel only: the primary the sentinels named at the last health check.
        self._primary: tuple[str, int] | None = None

    def ok(self) -> None:
        """An exchange with Redis went through."""
        self.up = True
        self.last_ok_at = time.time()

    def failed(self, exc: BaseException) -> None:
        """An exchange with Redis failed (the text names no password)."""
        self.up = False
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        self.last_error_at = time.time()

    async def ping(self) -> bool:
        """Whether Redis answers now (recorded as its health), within SOCKET_TIMEOUT: redis-py
        tries a command that timed out three times more, so a hung primary took half a minute
        to show as down on /status, /readyz and the metrics."""
        try:
            async with asyncio.timeout(SOCKET_TIMEOUT):
                await self._follow_primary()
                await self.client.ping()
        except (RedisError, OSError) as exc:
            self.failed(exc)
            return False
        self.ok()
        return True

    async def _follow_primary(self) -> None:
        """Sentinel only: ask the sentinels which server is primary, and when that changed
        close every pooled connection, idle or in use. redis-py asks only when it opens a
        connection, so after a failover the pool keeps talking to the old primary; after a
        contested one that server still says it is primary, and takes (and acknowledges)
        writes until the sentinels convert it, seconds later. Those writes are then lost."""
        if isinstance(self.client, RedisCluster):
            return
        pool = self.client.connection_pool
        if not isinstance(pool, SentinelConnectionPool):
            return
        # redis-py closes the idle ones itself on a change.
        primary: tuple[str, int] = await pool.get_master_address()  # type: ignore[no-untyped-call]
        if self._primary is not None and primary != self._primary:
            await pool.disconnect(inuse_connections=True)
        self._primary = primary

    async def clock(self, key: str) -> float:
        """The time now (seconds) by the clock of `key`'s primary: what a command sent to it
        next can measure its own lateness against, whatever the gateway's clock says."""
        try:
            seconds, micros = await (await self._primary_of(key)).time()
        except (RedisError, OSError) as exc:
            self.failed(exc)
            self._stale_slots = True
            raise RedisUnavailable(self.shown, f"did not answer: {exc}") from exc
        return seconds + micros / 1_000_000

    async def acknowledged(self, key: str, build: Callable[[Pipeline], object]) -> list[Any]:
        """The replies of the commands `build` queues (all on `key`'s slot), once `acks`
        replicas have them; RedisUnavailable when Redis fails or too few replicas answer."""
        try:
            pipe = (await self._primary_of(key)).pipeline(transaction=False)
            build(pipe)
            if self.acks:
                pipe.wait(self.acks, self.target.ack_timeout_ms)
            results: list[Any] = await pipe.execute()
        except (RedisError, OSError) as exc:
            self.failed(exc)
            self._stale_slots = True
            raise RedisUnavailable(self.shown, f"did not answer: {exc}") from exc
        if self.acks:
            acked = results.pop()
            if int(acked) < self.acks:
                error = RedisUnavailable(
                    self.shown,
                    f"a write reached {acked} of the {self.acks} replicas it needs within "
                    f"{self.target.ack_timeout_ms} ms",
                    results,
                )
                self.failed(error)
                raise error
        self.ok()
        return results

    async def _primary_of(self, key: str) -> Redis:
        """The client whose pipeline runs on `key`'s primary."""
        client = self.client
        if not isinstance(client, RedisCluster):
            return client
        # redis-py sends a cluster pipeline's WAIT to its default node, not the key's.
        if self._stale_slots:
            self._stale_slots = False
            await client.nodes_manager.initialize()
        await client.initialize()
        node = client.get_node_from_key(key)
        if node is None:
            raise RedisError(f"no primary serves the slot of key {key!r}")
        if node.name not in self._nodes:
            self._nodes[node.name] = Redis(
                host=node.host,
                port=int(node.port),
                username=self.target.username,
                password=self.target.password,
                **tls_options(self.target),
                socket_timeout=SOCKET_TIMEOUT,
                socket_connect_timeout=SOCKET_TIMEOUT,
            )
        return self._nodes[node.name]

    def view(self) -> dict[str, object]:
        """This Redis's health as `/status` shows it."""
        return {
            "redis": self.shown,
            "kind": self.target.kind,
            "up": self.up,
            "acks": self.acks,
            "lastError": self.last_error,
            "lastErrorAt": self.last_error_at,
            "lastOkAt": self.last_ok_at,
            "failures": self.failures,
        }

    async def close(self) -> None:
        """Close every connection pool."""
        await self.client.aclose()
        for node in self._nodes.values():
            await node.aclose()


class RedisConnections:
    """The process's Redis connections: one per URL, however many users name it."""

    def __init__(self) -> None:
        self._by_url: dict[str, RedisConnection] = {}
        self._watch: asyncio.Task[None] | None = None

    def connection(self, url: str, where: str = "the Redis URL") -> RedisConnection:
        """The shared connection to `url` (ValueError naming `where` for a bad URL)."""
        if url not in self._by_url:
            self._by_url[url] = RedisConnection(url, where)
        return self._by_url[url]

    def all(self) -> list[RedisConnection]:
        """Every connection made so far."""
        return list(self._by_url.values())

    async def check(self) -> None:
        """Ping each (the health `/readyz`, `/status` and the metrics show)."""
        for connection in self.all():
            await connection.ping()

    def start(self) -> None:
        """Ping every connection every HEALTH_INTERVAL seconds, until `close`."""
        if self._watch is None:
            self._watch = asyncio.create_task(self._watching(), name="redis health")

    async def _watching(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_INTERVAL)
            await self.check()

    def down(self) -> list[str]:
        """What `/readyz` waits for: each Redis whose last exchange failed."""
        return [
            f"redis {c.shown} ({c.last_error or 'unreachable'})"
            for c in self.all()
            if c.up is False
        ]

    async def close(self) -> None:
        """Stop the health checks and close every connection."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        for connection in self.all():
            await connection.close()
        self._by_url.clear()
