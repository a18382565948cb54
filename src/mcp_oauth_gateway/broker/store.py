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
from typing import Any, Protocol, TypeVar

import orjson
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from ..redis_clients import SOCKET_TIMEOUT, RedisConnection, RedisUnavailable

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

    async def first_use(self, kind: str, key: str, ttl: int) -> bool:
        """Remember `key` for `ttl` seconds; False when it is remembered already (atomic: of
        two replicas racing, one gets True)."""
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

    async def first_use(self, kind: str, key: str, ttl: int) -> bool:
        """Remember unless remembered and not expired."""
        now = time.monotonic()
        item = self._items.get((kind, key))
        if item is not None and item[0] >= now:
            return False
        self._sweep(now)
        self._items[(kind, key)] = (now + ttl, {})
        return True

    async def secret(self) -> bytes:
        """A per-process key (DCR client ids do not survive a restart without Redis)."""
        return self._secret

    async def close(self) -> None:
        """Nothing to release."""


# Seconds a failed store exchange is tried again: a request waits this long (and the exchange
# under way then) for a Sentinel or Cluster failover before it is answered 503. Longer than
# SOCKET_TIMEOUT, so that an exchange with a primary that hung is tried once more.
PATIENCE = SOCKET_TIMEOUT + 1
# A write is tried again for longer: most follow a take (a sign-in's state, a code, a refresh
# token whose provider token the provider has just replaced) that is lost if they never land.
WRITE_PATIENCE = 3 * SOCKET_TIMEOUT  # as long as `give_back` tries
_PAUSE = 0.2
# Seconds after the primary's clock was read that it may still run the command sent next: past
# it the gateway may have given up waiting (SOCKET_TIMEOUT) and answered 503, so the command
# must do nothing. Measured by the primary's own clock: no clock needs to agree with another.
ON_TIME = SOCKET_TIMEOUT / 2
# A command delivered late (held in a hung primary or a cut network after the gateway answered
# 503) must not take a code or a refresh token the client was told is untouched, nor put back
# one that has been used since.
_ON_TIME = """
local now = redis.call('TIME')
if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[1]) then
  return redis.error_reply('LATE the gateway no longer waits for this command')
end
"""
_PUT = _ON_TIME + "return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3], unpack(ARGV, 4))"
# A take leaves its value (and its expiry) behind a mark naming the take (ARGV[2]) for
# TAKEN_KEEP_MS: when the reply is lost (the primary died after the script ran and replicated),
# the request's next attempt gets the value again, where a plain DEL would tell the caller it
# had already been used. Any other take sees nothing. JSON never starts with a NUL byte.
TAKEN = b"\x00taken:"
TAKEN_KEEP_MS = int(4 * PATIENCE * 1000)
_MARK = "local mark = '\\0taken:' .. ARGV[2] .. '\\0'\n"
_TAKE = (
    _ON_TIME
    + _MARK
    + """
local value = redis.call('GET', KEYS[1])
if not value then return {-2, false} end
if string.sub(value, 1, 7) == '\\0taken:' then
  if string.sub(value, 1, #mark) ~= mark then return {-2, false} end
  local ends = string.find(value, '\\0', #mark + 1, true)
  return {tonumber(string.sub(value, #mark + 1, ends - 1)), string.sub(value, ends + 1)}
end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('SET', KEYS[1], mark .. ttl .. '\\0' .. value, 'PX', ARGV[3])
return {ttl, value}
"""
)
# Undoes a take, unless the key has been written since: it is back on the primary as it was.
_UNTAKE = (
    _ON_TIME
    + _MARK
    + """
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, #mark) ~= mark then return 0 end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return 1
"""
)
# SET NX that answers 1 also when the key holds this very claim's mark: a first attempt that
# ran on the primary but was not acknowledged is tried again, and must not refuse itself.
_FIRST_USE = (
    _ON_TIME
    + """
if redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3], 'NX') then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[2] then return 1 end
return 0
"""
)
T = TypeVar("T")


class RedisStore:
    """Redis (≥ 6.2), shared by every replica using the same URL. Every write is
    acknowledged (`RedisConnection.acknowledged`): a code redeemed, a refresh token rotated or
    a revocation is never reported done on a state a failover then loses; the caller gets
    RedisUnavailable (503, `Retry-After`) instead, after trying again for PATIENCE seconds
    (WRITE_PATIENCE for a write: what a request took is not lost to a write that failed after
    it while Redis failed over).
    Each command runs only while the gateway waits for its answer (`ON_TIME`)."""

    def __init__(self, connection: RedisConnection):
        self.connection = connection
        self.url = connection.url
        self._secret: bytes | None = None

    async def put(self, kind: str, key: str, value: dict[str, Any], ttl: int) -> None:
        """SET with an expiry, acknowledged."""
        name = f"{PREFIX}{kind}:{key}"
        raw = orjson.dumps(value)
        await _patiently(lambda: self._on_time(name, _PUT, raw, ttl * 1000), WRITE_PATIENCE)

    async def take(self, kind: str, key: str) -> dict[str, Any] | None:
        """GET and mark taken in one script: atomic, so a code is redeemed once even when two
        replicas race; put back when no replica acknowledged it (so it can be taken again)."""
        name = f"{PREFIX}{kind}:{key}"
        taker = secrets.token_hex(8)  # the same in every attempt: see TAKEN

        async def attempt() -> Any:
            try:
                [(_, raw)] = await self._on_time(name, _TAKE, taker, TAKEN_KEEP_MS)
            except RedisUnavailable as exc:
                await self._undo_take(name, taker, exc.results)
                raise
            return raw

        raw = await _patiently(attempt, PATIENCE)
        return None if raw is None else orjson.loads(raw)

    async def first_use(self, kind: str, key: str, ttl: int) -> bool:
        """SET NX with an expiry, acknowledged; tried again while Redis fails over."""
        name = f"{PREFIX}{kind}:{key}"
        mark = secrets.token_hex(16)
        [answer] = await _patiently(
            lambda: self._on_time(name, _FIRST_USE, mark, ttl * 1000), WRITE_PATIENCE
        )
        return bool(answer)

    async def _on_time(self, name: str, script: str, *args: bytes | int | str) -> list[Any]:
        """`script` on `name` (its deadline first of its arguments), acknowledged."""
        deadline = int((await self.connection.clock(name) + ON_TIME) * 1000)
        return await self.connection.acknowledged(
            name, lambda pipe: pipe.eval(script, 1, name, deadline, *args)
        )

    async def _undo_take(self, name: str, taker: str, results: list[Any] | None) -> None:
        """Put back on the primary a value taken there but not acknowledged, unless another
        has been written since (best effort: Redis is failing)."""
        if not results or results[0][1] is None:
            return
        millis, raw = int(results[0][0]), results[0][1]
        # A key without expiry (none of the Broker's) is put back for a day.
        expiry = millis if millis > 0 else 86_400_000

        async def attempt() -> None:
            try:
                await self._on_time(name, _UNTAKE, taker, raw, expiry)
            except RedisUnavailable as exc:
                if exc.results is None:
                    raise  # not run: try again
                # Run: the replicas that lack it lack the take too.

        with contextlib.suppress(RedisUnavailable):
            await _patiently(attempt, WRITE_PATIENCE)

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


async def _patiently(attempt: Callable[[], Awaitable[T]], patience: float) -> T:
    """`attempt()`, tried again while Redis is unavailable, for up to `patience` seconds."""
    give_up = time.monotonic() + patience
    while True:
        try:
            return await attempt()
        except RedisUnavailable:
            if time.monotonic() >= give_up:
                raise
            await asyncio.sleep(_PAUSE)


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
