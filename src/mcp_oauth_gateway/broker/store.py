"""The broker's short-lived state behind one interface: in memory (one process) or Redis
(several replicas behind one load balancer). Everything expires; `take` is atomic, so codes and
states are single use even across replicas."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from ..redis_clients import RedisConnection, RedisUnavailable

PREFIX = "mcp-oauth-gateway:broker:"
# How long a write that gives back what a failed request took (a refresh token claimed for a
# rotation, a code claimed for its redemption) keeps trying while Redis fails over: a Sentinel
# set whose down-after-milliseconds is a few seconds has promoted a replica by then. The request
# waits that long at most; the client was promised that nothing changed.
GIVE_BACK_SECONDS = 15.0
GIVE_BACK_PAUSE = 0.2

log = logging.getLogger("mcp_oauth_gateway.broker")


class BrokerStore(Protocol):
    async def put(self, kind: str, key: str, value: dict[str, Any], ttl: int) -> None:
        """Store `value` for `ttl` seconds."""
        ...

    async def take(self, kind: str, key: str) -> dict[str, Any] | None:
        """Return and delete in one step (None when absent or expired)."""
        ...

    async def secret(self) -> bytes:
        """The HMAC key shared by every replica (created once)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class MemoryStore:
    """A dict with expiry; the default for a single gateway process."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._secret = secrets.token_bytes(32)

    def _sweep(self, now: float) -> None:
        if len(self._items) > 1024:
            for item_key in [k for k, (exp, _) in self._items.items() if exp < now]:
                del self._items[item_key]

    async def put(self, kind: str, key: str, value: dict[str, Any], ttl: int) -> None:
        """Store with expiry."""
        now = time.monotonic()
        self._sweep(now)
        self._items[(kind, key)] = (now + ttl, value)

    async def take(self, kind: str, key: str) -> dict[str, Any] | None:
        """Pop if not expired."""
        item = self._items.pop((kind, key), None)
        if item is None or item[0] < time.monotonic():
            return None
        return item[1]

    async def secret(self) -> bytes:
        """A per-process key (DCR client ids do not survive a restart without Redis)."""
        return self._secret

    async def close(self) -> None:
        """Nothing to release."""


class RedisStore:
    """Redis (GETDEL needs Redis ≥ 6.2), shared by every replica using the same URL. Every
    write is acknowledged (`RedisConnection.acknowledged`): a code redeemed, a refresh token
    rotated or a revocation is never reported done on a state a failover then loses; the
    caller gets RedisUnavailable (503, `Retry-After`) instead."""

    def __init__(self, connection: RedisConnection):
        self.connection = connection
        self.url = connection.url
        self._secret: bytes | None = None

    async def put(self, kind: str, key: str, value: dict[str, Any], ttl: int) -> None:
        """SET with EX, acknowledged."""
        name = f"{PREFIX}{kind}:{key}"
        await self.connection.acknowledged(
            name, lambda pipe: pipe.set(name, orjson.dumps(value), ex=ttl)
        )

    async def take(self, kind: str, key: str) -> dict[str, Any] | None:
        """GETDEL: atomic, so a code is redeemed once even when two replicas race; taken back
        when no replica acknowledged it (so the caller may try again)."""
        name = f"{PREFIX}{kind}:{key}"

        def build(pipe: Pipeline) -> None:
            pipe.pttl(name)
            pipe.getdel(name)

        try:
            _, raw = await self.connection.acknowledged(name, build)
        except RedisUnavailable as exc:
            await self._undo_take(name, exc.results)
            raise
        return None if raw is None else orjson.loads(raw)

    async def _undo_take(self, name: str, results: list[Any] | None) -> None:
        """Put back a value taken but not acknowledged (best effort: Redis is failing)."""
        if not results or results[1] is None:
            return
        millis = int(results[0])
        with contextlib.suppress(RedisError, OSError):
            await self.connection.client.set(
                name, results[1], px=millis if millis > 0 else None, nx=True
            )

    async def secret(self) -> bytes:
        """Created by the first replica (SET NX, acknowledged), read by the others."""
        if self._secret is None:
            key = f"{PREFIX}secret"

            def build(pipe: Pipeline) -> None:
                pipe.set(key, secrets.token_bytes(32), nx=True)
                pipe.get(key)

            _, stored = await self.connection.acknowledged(key, build)
            if not isinstance(stored, bytes):
                raise RuntimeError(
                    f"Redis key {key} holds no secret (was it deleted, or is the "
                    "client decoding responses?)"
                )
            self._secret = stored
        return self._secret

    async def close(self) -> None:
        """Nothing: the connection is the process's (RedisConnections closes it)."""


async def give_back(write: Callable[[], Awaitable[object]], what: str) -> bool:
    """Run `write` (a store write that puts back `what` a failed request took) until the store
    acknowledges it or GIVE_BACK_SECONDS pass; whether it did. A claim the store acknowledged
    survives a failover, so giving it back only once, while the primary is gone, would lose
    what the client still holds."""
    deadline = time.monotonic() + GIVE_BACK_SECONDS
    while True:
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await write()
            return True
        except (RedisUnavailable, RedisError, OSError, TimeoutError) as exc:
            failure = exc
        if time.monotonic() + GIVE_BACK_PAUSE >= deadline:
            log.error(
                "%s could not be given back within %.0f s (%s): its holder must sign in again",
                what,
                GIVE_BACK_SECONDS,
                type(failure).__name__,
            )
            return False
        await asyncio.sleep(GIVE_BACK_PAUSE)
