"""One-time use of a DPoP proof's `jti` while the proof could be accepted (RFC 9449 §11.1).

A proof is remembered under a hash of its key's thumbprint, its `jti` and its `htu`: the key
stays a fixed size whatever `jti` a client chose, one client cannot use up another's `jti`
values (its proofs carry another thumbprint), and the same `jti` at two URLs is two proofs, as
§11.1 allows. It is remembered until its `iat` leaves the window (at most twice the window
from now, when `iat` is in the future), after which `verify_proof` refuses it anyway.

Record a proof only once it has passed every other check (`verify_proof`, and at a token
endpoint the grant too), so that only proofs the server would act on take room.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import time
from collections.abc import Callable
from typing import Protocol

import orjson
from redis.exceptions import RedisError

from ..redis_clients import RedisConnection, RedisUnavailable
from .errors import refused
from .proofs import Proof

DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_PREFIX = "mcp-oauth-gateway:dpop:jti:"
# Added to how long a proof is remembered: the clock that expires the entry (the process's
# monotonic one, or Redis') is not the one `iat` was judged by.
_MARGIN = 1.0


class ReplayCache(Protocol):
    """Where the `jti` of accepted proofs is remembered."""

    async def first_use(self, key: str, ttl: float) -> bool:
        """Remember `key` for `ttl` seconds; False when it is remembered already."""
        ...


class ReplayCacheFull(Exception):
    """The in-memory cache holds as many unexpired proofs as it may: answer 503 with
    `Retry-After` (the server's limit, not the client's mistake)."""

    def __init__(self, entries: int, retry_after: int):
        super().__init__(
            f"the DPoP replay cache holds {entries} unexpired proofs, its limit; the oldest "
            f"expires in {retry_after} s (raise the limit or share the cache through Redis)"
        )
        self.retry_after = retry_after


def replay_key(proof: Proof) -> str:
    """The fixed-size name a proof is remembered by."""
    identity = orjson.dumps([proof.jkt, proof.jti, proof.htu])
    return hashlib.sha256(identity).hexdigest()


def replay_ttl(proof: Proof, now: float, window: float) -> float:
    """Seconds until the proof's `iat` is out of the window, and a margin."""
    return max(proof.iat + window - now, 0.0) + _MARGIN


async def check_replay(cache: ReplayCache, proof: Proof, now: float, window: float) -> None:
    """Record the proof's first use; DpopError when it was used already (ReplayCacheFull or
    RedisUnavailable when it cannot be recorded: never accepted unrecorded)."""
    if not await cache.first_use(replay_key(proof), replay_ttl(proof, now, window)):
        raise refused(
            "this DPoP proof was used already (its jti); make a new proof, with a new jti, "
            "for every request"
        )


class MemoryReplayCache:
    """One process's proofs, bounded: at most `max_entries` unexpired entries, each forgotten
    when it expires (a heap ordered by expiry).

    When it is full it fails closed: a new proof is refused (ReplayCacheFull, 503 with
    `Retry-After` until the oldest entry expires) rather than an unexpired entry forgotten.
    Forgetting one would accept that proof a second time, which is the one thing this cache
    exists to prevent, and an attacker able to fill it could then choose when replays work.
    Only fully verified proofs are recorded, so filling it takes valid proofs at the rate
    limits allow; the default (100 000, about 25 MB) holds five minutes of over 300 proofs a
    second. Replicas share nothing through it: use `RedisReplayCache` with more than one.
    """

    def __init__(
        self, max_entries: int = DEFAULT_MAX_ENTRIES, clock: Callable[[], float] = time.monotonic
    ):
        if max_entries < 1:
            raise ValueError("the DPoP replay cache needs room for one entry at least")
        self.max_entries = max_entries
        self._clock = clock
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def _forget_expired(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            expiry, key = heapq.heappop(heap)
            if self._expiry.get(key) == expiry:
                del self._expiry[key]

    async def first_use(self, key: str, ttl: float) -> bool:
        """Remember `key` for `ttl` seconds; False when it is remembered already."""
        now = self._clock()
        self._forget_expired(now)
        if key in self._expiry:
            return False
        if len(self._expiry) >= self.max_entries:
            raise ReplayCacheFull(len(self._expiry), math.ceil(self._heap[0][0] - now))
        expiry = now + ttl
        self._expiry[key] = expiry
        heapq.heappush(self._heap, (expiry, key))
        return True


class RedisReplayCache:
    """Proofs remembered in Redis, shared by every replica: `SET key 1 NX PX ttl`, one round
    trip that records and answers whether the key was new; Redis expires the entry, and its
    memory is Redis' to bound (`maxmemory`; never an eviction policy that drops these keys).

    The write is not acknowledged by replicas (no `WAIT`). Redis replicates asynchronously,
    so a failover can lose the few entries written in the last milliseconds before it; a
    proof among them could be replayed once more before its `iat` leaves the window. That
    takes an attacker who already holds the proof and its token (sent over TLS) at the moment
    of a failover, and what they gain is one call the client was entitled to make; against
    that, `WAIT` would add a round trip to the replicas to every call. A Redis that does not
    answer refuses the proof (RedisUnavailable: 503 with `Retry-After`), never accepts it.
    """

    def __init__(self, connection: RedisConnection, prefix: str = DEFAULT_PREFIX):
        self.connection = connection
        self.prefix = prefix

    async def first_use(self, key: str, ttl: float) -> bool:
        """Remember `key` for `ttl` seconds; False when it is remembered already."""
        millis = max(1, math.ceil(ttl * 1000))
        try:
            created = await self.connection.client.set(self.prefix + key, 1, nx=True, px=millis)
        except (RedisError, OSError) as exc:
            self.connection.failed(exc)
            raise RedisUnavailable(self.connection.shown, f"did not answer: {exc}") from exc
        self.connection.ok()
        return bool(created)
