"""The broker's short-lived state behind one interface: in memory (one process) or Redis
(several replicas behind one load balancer). Everything expires; `take` is atomic, so codes and
states are single use even across replicas."""

from __future__ import annotations

import secrets
import time
from typing import Any, Protocol

import orjson

PREFIX = "mcp-oauth-gateway:broker:"


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
    """Redis (GETDEL needs Redis ≥ 6.2): shared by every replica using the same URL."""

    def __init__(self, url: str):
        import redis.asyncio as redis

        self.url = url
        self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._secret: bytes | None = None

    async def put(self, kind: str, key: str, value: dict[str, Any], ttl: int) -> None:
        """SET with EX."""
        await self._client.set(f"{PREFIX}{kind}:{key}", orjson.dumps(value), ex=ttl)

    async def take(self, kind: str, key: str) -> dict[str, Any] | None:
        """GETDEL: atomic, so a code is redeemed once even when two replicas race."""
        raw = await self._client.getdel(f"{PREFIX}{kind}:{key}")
        return None if raw is None else orjson.loads(raw)

    async def secret(self) -> bytes:
        """Created by the first replica (SET NX), read by the others."""
        if self._secret is None:
            key = f"{PREFIX}secret"
            await self._client.set(key, secrets.token_bytes(32), nx=True)
            stored = await self._client.get(key)
            if not isinstance(stored, bytes):
                raise RuntimeError(
                    f"Redis key {key} holds no secret (was it deleted, or is the "
                    "client decoding responses?)"
                )
            self._secret = stored
        return self._secret

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
