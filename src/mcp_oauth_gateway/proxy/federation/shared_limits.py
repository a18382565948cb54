"""The session limits of a federated route rule (`session.MAX_SESSIONS_PER_OWNER` per caller,
`session.MAX_SESSIONS` in all) counted in Redis, so that they hold across every replica sharing
it rather than per process: a sorted set per caller (`…:owner:<sha256 of the caller>`) and one
for the rule (`…:sessions`), each session scored by when it was last used. A new session past a
limit pushes out the one idle the longest, which ends at every replica (as in one process).

Redis not answering when a session is opened: the session is refused (503, `Retry-After`) rather
than let through uncounted, since every replica would then let a caller open as many as it
holds in memory, and the sessions it pushes out of Redis are no longer found by other replicas
anyway. Sessions already open go on at the replicas holding them."""

from __future__ import annotations

import hashlib
import time

import orjson

from .session import Owner
from .shared_keys import FAILURES, RedisHeld, log

# How often (seconds) a replica tells Redis a session it serves is still in use: the limits
# push out the session idle the longest, to within this.
TOUCH_EVERY = 10.0


def owner_digest(owner: Owner) -> str | None:
    """What a caller's sessions are counted under (None: an anonymous caller, counted only in
    the rule's limit, as in one process)."""
    if owner is None or owner[1] is None:
        return None
    return hashlib.sha256(orjson.dumps(list(owner))).hexdigest()


def member(session_id: str, owner: Owner) -> str:
    """The session as the rule's set holds it: with its caller, to count it out there too."""
    return f"{owner_digest(owner) or '-'}:{session_id}"


class SharedLimits(RedisHeld):
    """The rule's session limits in Redis."""

    def _owner_key(self, digest: str) -> str:
        return f"{self.namespace}owner:{digest}"

    async def _admitted(self, key: str, name: str, limit: int) -> list[str]:
        """`name` added to the set `key`, which keeps its `limit` newest; the members pushed
        out, at once."""
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {name: time.time()})
            pipe.zrange(key, 0, -(limit + 1))
            pipe.zremrangebyrank(key, 0, -(limit + 1))
            pipe.expire(key, self.ttl)
            done = await pipe.execute()
        return [m.decode() if isinstance(m, bytes) else str(m) for m in done[1]]

    async def admit(self, session_id: str, owner: Owner, per_owner: int, limit: int) -> list[str]:
        """Count a new session in; the ids of the sessions it pushed out (to end everywhere).
        RedisUnavailable when Redis does not answer."""
        digest = owner_digest(owner)
        rule = f"{self.namespace}sessions"
        try:
            own: list[str] = []
            if digest is not None:
                own = await self._admitted(self._owner_key(digest), session_id, per_owner)
                if own:
                    await self._client.zrem(rule, *(member(p, owner) for p in own))
            anyone = []
            for gone in await self._admitted(rule, member(session_id, owner), limit):
                gone_owner, _, gone_id = gone.partition(":")
                if gone_owner != "-":
                    await self._client.zrem(self._owner_key(gone_owner), gone_id)
                anyone.append(gone_id)
        except FAILURES as exc:
            raise self.unavailable(exc) from exc
        return list(dict.fromkeys(p for p in [*own, *anyone] if p != session_id))

    async def touch(self, session_id: str, owner: Owner) -> None:
        """The session was used now (only when it is still counted)."""
        now = time.time()
        digest = owner_digest(owner)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zadd(f"{self.namespace}sessions", {member(session_id, owner): now}, xx=True)
                if digest is not None:
                    pipe.zadd(self._owner_key(digest), {session_id: now}, xx=True)
                await pipe.execute()
        except FAILURES as exc:  # it may be pushed out a little early
            log.warning("federated session's use not counted in Redis: %s", exc)

    async def release(self, session_id: str, owner: Owner) -> None:
        """Count an ended session out."""
        digest = owner_digest(owner)
        try:
            await self._client.zrem(f"{self.namespace}sessions", member(session_id, owner))
            if digest is not None:
                await self._client.zrem(self._owner_key(digest), session_id)
        except FAILURES as exc:  # pushed out later, as an idle one
            log.warning("federated session not counted out in Redis: %s", exc)
