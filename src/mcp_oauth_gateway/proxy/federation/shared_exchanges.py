"""A session's exchanges (`exchange`) in Redis, beside its record: the targets' requests to the
client by the id minted for them and by the target's own id (one hash, `…:session:{<id>}:asked`,
at most MAX_SHARED_ASKED fields), and the client's requests in flight with their targets and
progress token (`…:session:{<id>}:running`); both with the session's TTL from their last write.
Taking an answer's id and withdrawing a request each run as one script, so an id is taken once
whichever replicas race for it.

Redis not answering: a request minted meanwhile is answered only at the replica that minted it,
a cancellation reaches only the targets this replica knows the request went to, and an answer
whose id Redis had is refused until Redis answers (it may have been taken at another replica)."""

from __future__ import annotations

import orjson

from .exchange import MAX_ASKED
from .shared_keys import FAILURES, RedisHeld, log

# Fields of a session's `asked` hash (two per request): past it, a target's request is answered
# only at the replica that relayed it.
MAX_SHARED_ASKED = 2 * MAX_ASKED

_ASK = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], 'a:' .. ARGV[1], ARGV[2] .. '\\n' .. ARGV[3],
           'o:' .. ARGV[2] .. '\\n' .. ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""
_TAKE = """
local asked = redis.call('HGET', KEYS[1], 'a:' .. ARGV[1])
if not asked then return false end
redis.call('HDEL', KEYS[1], 'a:' .. ARGV[1], 'o:' .. asked)
return asked
"""
_WITHDRAW = """
local minted = redis.call('HGET', KEYS[1], 'o:' .. ARGV[1])
if not minted then return false end
redis.call('HDEL', KEYS[1], 'o:' .. ARGV[1], 'a:' .. minted)
return minted
"""


def _running(raw: object) -> tuple[tuple[str, ...], str | None]:
    """(targets, progress token key) of a stored request in flight (nothing if unreadable)."""
    try:
        held = orjson.loads(raw) if isinstance(raw, bytes | str) else None
    except orjson.JSONDecodeError:
        held = None
    if not isinstance(held, dict) or not isinstance(held.get("t"), list):
        return (), None
    progress = held.get("p")
    targets = tuple(t for t in held["t"] if isinstance(t, str))
    return targets, progress if isinstance(progress, str) else None


class SharedExchanges(RedisHeld):
    """`exchange.ExchangeStore` in Redis."""

    async def asked(self, session_id: str, minted: str, target: str, own: bytes) -> bool:
        """Kept under both ids at once (unless the session has too many waiting)."""
        key = self.session_key(session_id, "asked")
        try:
            done = await self._client.eval(
                _ASK, 1, key, minted, target, own, MAX_SHARED_ASKED, self.ttl
            )
        except FAILURES as exc:
            log.warning("federated request to the client not shared in Redis: %s", exc)
            return False
        return bool(done)

    async def taken(self, session_id: str, minted: str) -> tuple[str, bytes] | None:
        """Taken once, by one script: a second take finds nothing."""
        key = self.session_key(session_id, "asked")
        try:
            found = await self._client.eval(_TAKE, 1, key, minted)
        except FAILURES as exc:
            raise self.unavailable(exc) from exc
        if not isinstance(found, bytes):
            return None
        target, _, own = found.partition(b"\n")
        return target.decode(), own

    async def withdrawn(self, session_id: str, target: str, own: bytes) -> str | None:
        """Forgotten under both ids at once."""
        key = self.session_key(session_id, "asked")
        try:
            found = await self._client.eval(_WITHDRAW, 1, key, target.encode() + b"\n" + own)
        except FAILURES as exc:
            log.warning("federated request to the client not withdrawn in Redis: %s", exc)
            return None
        return found.decode() if isinstance(found, bytes) else None

    async def started(
        self, session_id: str, request: bytes, targets: tuple[str, ...], progress: bytes | None
    ) -> None:
        """Kept until finished (or the session's TTL)."""
        key = self.session_key(session_id, "running")
        held = {"t": list(targets), "p": progress.decode() if progress is not None else None}
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(key, request, orjson.dumps(held))
                pipe.expire(key, self.ttl)
                await pipe.execute()
        except FAILURES as exc:
            log.warning("federated request in flight not shared in Redis: %s", exc)

    async def finished(self, session_id: str, request: bytes) -> None:
        """Forgotten."""
        try:
            await self._client.hdel(self.session_key(session_id, "running"), request)
        except FAILURES as exc:  # it expires with the session's TTL
            log.warning("federated request in flight not removed from Redis: %s", exc)

    async def running(self, session_id: str, request: bytes) -> tuple[str, ...]:
        """Read from Redis (none when it does not answer)."""
        try:
            raw = await self._client.hget(self.session_key(session_id, "running"), request)
        except FAILURES as exc:
            log.warning("federated request in flight not read from Redis: %s", exc)
            return ()
        return _running(raw)[0] if raw is not None else ()

    async def progressing(self, session_id: str, target: str, progress: bytes) -> bool:
        """Read from Redis (False when it does not answer)."""
        try:
            every = await self._client.hvals(self.session_key(session_id, "running"))
        except FAILURES as exc:
            log.warning("federated requests in flight not read from Redis: %s", exc)
            return False
        token = progress.decode()
        return any(target in t and p == token for t, p in map(_running, every))

    async def forget_exchanges(self, session_id: str) -> None:
        """Drop the session's exchanges (it ended)."""
        try:
            await self._client.delete(
                self.session_key(session_id, "asked"), self.session_key(session_id, "running")
            )
        except FAILURES as exc:  # they expire with their TTL
            log.warning("federated exchanges not removed from Redis: %s", exc)
