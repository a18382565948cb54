"""Where the federation stage finds a client's session: this process's table and, when sessions
are shared across replicas, Redis (`shared`), kept in step: a session is counted against the
limits in Redis when it is opened (RedisUnavailable when Redis cannot count it), its use told
to Redis now and then, and its exchanges shared with it."""

from __future__ import annotations

import time

from ...controlplane.snapshot import CompiledTarget
from .session import ClientSession, Owner, SessionTable
from .shared import SharedSessions, adopt, record_of, session_from
from .shared_limits import TOUCH_EVERY


class Directory:
    """A route rule's sessions: the process's table, and Redis when shared."""

    def __init__(
        self,
        table: SessionTable,
        shared: SharedSessions | None,
        targets: tuple[CompiledTarget, ...],
    ):
        self.table = table
        self.shared = shared
        self.targets = targets

    async def find(self, session_id: str, owner: Owner) -> ClientSession | None:
        """The caller's session: this process's copy (while Redis, when shared, still has it:
        it may have been ended at another replica; with what another replica changed of it),
        or else rebuilt from Redis. Another caller's session is unknown to this one, wherever
        it is kept."""
        session = self.table.find(session_id, owner)
        if self.shared is None:
            return session
        if session is not None:
            alive, record = await self.shared.current(session_id)
            if not alive:
                self.table.remove(session_id)
                return None
            if record is not None and record != session.stored:
                adopt(session, record)  # another replica opened a target again, say
            await self._touch(session)
            return session
        record = await self.shared.load(session_id)
        found = session_from(session_id, record, self.targets) if record else None
        if found is None or found.owner != owner:
            return None
        # Another request may have rebuilt it meanwhile: one copy per process.
        kept = self.table.find(session_id, owner)
        if kept is not None:
            return kept
        found.stored = record
        found.exchanges.share(self.shared, session_id)
        self.table.add(found)
        await self._touch(found)
        return found

    async def _touch(self, session: ClientSession) -> None:
        """Tell Redis the session is in use, now and then (the limits push out idle ones)."""
        now = time.monotonic()
        if self.shared is not None and now - session.touched_at >= TOUCH_EVERY:
            session.touched_at = now
            await self.shared.touch(session.id, session.owner)

    async def add(self, session: ClientSession) -> None:
        """Keep a new session (in Redis too when shared, counted against the limits across
        replicas, before its client learns its id): RedisUnavailable when Redis cannot count
        it. The sessions it pushes out (its caller's idle the longest past the per-caller limit,
        anyone's past the rule's) end at every replica. One pushed out only by this process's
        own limit stays in Redis, for another replica or for later."""
        if self.shared is not None:
            limits = self.table.per_owner, self.table.limit
            for gone in await self.shared.admit(session.id, session.owner, *limits):
                self.table.remove(gone)
                await self.shared.drop(gone)
            session.exchanges.share(self.shared, session.id)
            session.touched_at = time.monotonic()
        evicted = self.table.add(session)
        if evicted is not None and evicted.owner == session.owner and self.shared is not None:
            await self.shared.end(evicted.id, evicted.owner)
        await self.store(session)

    async def store(self, session: ClientSession) -> None:
        """Give Redis what changed of the session (a target opened again, say), if shared."""
        if self.shared is None or session.id not in self.table:
            return
        record = record_of(session)
        if record != session.stored:
            session.stored = record
            await self.shared.save(session)

    async def remove(self, session_id: str, owner: Owner = None) -> None:
        """Forget a session the client (`owner`) ended, here and (when shared) at every
        replica."""
        self.table.remove(session_id)
        if self.shared is not None:
            await self.shared.end(session_id, owner)
