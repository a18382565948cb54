"""Rate limits by caller: a token bucket per key (a CEL expression over the claims), in process
or shared by every replica through Redis (one atomic script per request, Redis' own clock).

A bucket is the key's value together with the issuer of the caller's token: `sub` (like any
claim) is unique only within its issuer, and alice at one provider is not alice at another."""

from __future__ import annotations

import json
import logging
import math
import time
from collections import OrderedDict
from typing import Protocol

from redis.exceptions import RedisError

from .. import audit
from ..asgi import CLAIMS_KEY, TOKEN_KEY, ASGIApp, Receive, Scope, Send, send_error
from ..controlplane.cel import value_of
from ..controlplane.snapshot import CompiledRateLimit
from ..redis_clients import RETRY_AFTER, RedisConnection
from .authz import activation_for
from .bounded import BoundedCache, per_token
from .metrics import Metrics

log = logging.getLogger("mcp_oauth_gateway.ratelimit")
STAGE = "rate-limit"
MAX_LOCAL_KEYS = 100_000
ANONYMOUS = "-"
# Tokens whose key is remembered (a key over the claims alone is the same for a token's life).
KEY_MEMO = 10_000

# KEYS[1] bucket; ARGV capacity, tokens per second. Returns {allowed, seconds to wait}.
_SCRIPT = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - ts) * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
return {allowed, tostring(wait)}
"""


def bucket_of(issuer: object, value: str) -> str:
    """The bucket of a key value for a caller whose token `issuer` issued (None: no token).
    JSON, so no issuer and value can spell another pair's bucket, nor the anonymous one."""
    return json.dumps([issuer if isinstance(issuer, str) else None, value], separators=(",", ":"))


class Limiter(Protocol):
    async def take(self, key: str) -> float:
        """0 when the request may pass, else the seconds until it could."""
        ...


class LocalLimiter:
    """Buckets in this process (least recently used keys forgotten beyond 100,000)."""

    def __init__(self, capacity: int, per_second: float):
        self.capacity = capacity
        self.per_second = per_second
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    async def take(self, key: str) -> float:
        """Token bucket arithmetic; never blocks."""
        now = time.monotonic()
        tokens, last = self._buckets.pop(key, (float(self.capacity), now))
        tokens = min(self.capacity, tokens + (now - last) * self.per_second)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.per_second
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > MAX_LOCAL_KEYS:
            self._buckets.popitem(last=False)
        return wait


class RedisLimiter:
    """Buckets in Redis, shared by every replica using the same URL and policy. Not
    acknowledged by replicas: a failover may refill some buckets (documented)."""

    def __init__(
        self, connection: RedisConnection, namespace: str, capacity: int, per_second: float
    ):
        self.connection = connection
        self._script = connection.client.register_script(_SCRIPT)
        self.prefix = f"mcp-oauth-gateway:ratelimit:{namespace}:"
        self.capacity = capacity
        self.per_second = per_second

    async def take(self, key: str) -> float:
        """One atomic script call (a failure is the connection's health too)."""
        try:
            allowed, wait = await self._script(
                keys=[self.prefix + key], args=[self.capacity, self.per_second]
            )
        except (RedisError, OSError) as exc:
            self.connection.failed(exc)
            raise
        return 0.0 if int(allowed) == 1 else float(wait)


class RateLimit:
    """429 with `Retry-After` once a caller's bucket is empty."""

    def __init__(
        self,
        app: ASGIApp,
        limit: CompiledRateLimit,
        limiter: Limiter,
        policy: str,
        metrics: Metrics | None = None,
    ):
        self.app = app
        self.key = limit.key
        self.limiter = limiter
        self.policy = policy
        self.needs_request = limit.key.uses_request
        self.rejected = metrics.rejection_counter(policy) if metrics else None
        self._keys: BoundedCache[str, str] | None = (
            None if self.needs_request else BoundedCache(KEY_MEMO)
        )

    def _key(self, scope: Scope) -> str:
        """The caller's bucket: the key expression's value with its token's issuer (remembered
        per token when it reads the claims alone), or the shared anonymous bucket."""
        return per_token(self._keys, scope.get(TOKEN_KEY), lambda: self._compute_key(scope))

    def _compute_key(self, scope: Scope) -> str:
        activation = activation_for(scope, self.key.claims, self.needs_request)
        value = value_of(self.key, activation)
        if not isinstance(value, str | int) or value == "":
            return ANONYMOUS
        claims = scope.get(CLAIMS_KEY)
        issuer = claims.get("iss") if isinstance(claims, dict) else None
        return bucket_of(issuer, str(value))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self._key(scope)
        try:
            wait = await self.limiter.take(key)
        except Exception as exc:  # a limiter that cannot answer must not let traffic through
            log.error("rate limiter of GatewayPolicy %s unavailable: %s", self.policy, exc)
            audit.deny(scope, STAGE, "the rate limiter is unavailable (fail closed)")
            await send_error(
                send,
                503,
                "temporarily_unavailable",
                "the rate limiter is unavailable; try again shortly",
                [(b"retry-after", str(RETRY_AFTER).encode())],
            )
            return
        if wait > 0:
            if self.rejected is not None:
                self.rejected()
            audit.deny(
                scope,
                STAGE,
                f"rate limit of GatewayPolicy {self.policy} exhausted for this caller; "
                f"next request in {math.ceil(wait)} s",
            )
            await send_error(
                send,
                429,
                "rate_limited",
                f"too many requests for this caller; retry in {math.ceil(wait)} s",
                [(b"retry-after", str(max(1, math.ceil(wait))).encode())],
            )
            return
        await self.app(scope, receive, send)
