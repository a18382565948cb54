"""A session's GET stream events kept in Redis (`backlog`), so that a client resumes its stream at
any replica sharing it: a Redis stream per session (`…:session:{<id>}:events`, its entries'
ids the events' ids, capped at MAX_EVENTS) and a hash of the targets' cursors
(`…:session:{<id>}:cursors`), both with the session's TTL from their last write. Redis not
answering: the event goes to the client live without an id (see `backlog`), and a resume starts
from now."""

from __future__ import annotations

from typing import Any

import orjson

from .backlog import MAX_EVENT_BYTES, MAX_EVENTS, Cursor, Held, Replay
from .shared_keys import FAILURES, RedisHeld, log

_DATA = b"d"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cursors(stored: dict[Any, Any]) -> dict[str, Cursor]:
    out: dict[str, Cursor] = {}
    for name, raw in stored.items():
        try:
            held = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(held, list) and len(held) == 2 and isinstance(held[1], str):
            session = held[0] if isinstance(held[0], str) else None
            out[_text(name)] = (session, held[1])
    return out


class SharedBacklog(RedisHeld):
    """`backlog.Backlog` in Redis."""

    async def keep(
        self, session: Held, data: bytes, target: str, cursor: Cursor | None
    ) -> str | None:
        """Kept in the session's stream, the target's cursor moved with it, at once."""
        if len(data) > MAX_EVENT_BYTES:
            return None
        events = self.session_key(session.id, "events")
        cursors = self.session_key(session.id, "cursors")
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.xadd(events, {_DATA: data}, maxlen=MAX_EVENTS, approximate=False)
                pipe.expire(events, self.ttl)
                if cursor is not None:
                    pipe.hset(cursors, target, orjson.dumps(list(cursor)))
                    pipe.expire(cursors, self.ttl)
                done = await pipe.execute()
        except FAILURES as exc:
            log.warning("federated stream event not kept in Redis: %s", exc)
            return None
        return _text(done[0])

    async def prime(self, session: Held) -> str | None:
        """The session's last kept id, or a new one kept without data."""
        events = self.session_key(session.id, "events")
        try:
            last = await self._client.xrevrange(events, count=1)
            if last:
                return _text(last[0][0])
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.xadd(events, {_DATA: b""}, maxlen=MAX_EVENTS, approximate=False)
                pipe.expire(events, self.ttl)
                done = await pipe.execute()
        except FAILURES as exc:
            log.warning("federated stream not primed in Redis: %s", exc)
            return None
        return _text(done[0])

    async def resume(self, session: Held, last: str) -> Replay | None:
        """The session's kept events after `last`, read at once with the cursors."""
        events = self.session_key(session.id, "events")
        cursors = self.session_key(session.id, "cursors")
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.xrange(events, last, last)
                pipe.xrange(events, f"({last}", "+")
                pipe.hgetall(cursors)
                found, after, stored = await pipe.execute()
        except FAILURES as exc:
            log.warning("federated stream not resumed from Redis: %s", exc)
            return None
        if not found:
            return None
        kept = tuple(
            (_text(entry_id), fields[_DATA]) for entry_id, fields in after if fields.get(_DATA)
        )
        return Replay(kept, _cursors(stored))

    async def forget_backlog(self, session_id: str) -> None:
        """Drop the session's kept events (it ended)."""
        try:
            await self._client.delete(
                self.session_key(session_id, "events"), self.session_key(session_id, "cursors")
            )
        except FAILURES as exc:  # they expire with their TTL
            log.warning("federated stream events not removed from Redis: %s", exc)
