"""Where the federation stage finds a client's session: this process's table and, when sessions
are shared across replicas, Redis (`shared`), kept in step."""

from __future__ import annotations

from ...controlplane.snapshot import CompiledTarget
from .session import ClientSession, Owner, SessionTable
from .shared import SharedSessions, adopt, record_of, session_from


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
        self.table.add(found)
        return found

    async def add(self, session: ClientSession) -> None:
        """Keep a new session (in Redis too when shared, before its client learns its id). A
        session of the same caller pushed out by it (past its per-caller limit) ends at every
        replica, so a caller opening sessions in a loop does not fill Redis either; one pushed
        out by the process's limit stays in Redis, for another replica or for later."""
        evicted = self.table.add(session)
        if evicted is not None and evicted.owner == session.owner and self.shared is not None:
            await self.shared.forget(evicted.id)
        await self.store(session)

    async def store(self, session: ClientSession) -> None:
        """Give Redis what changed of the session (a target opened again, say), if shared."""
        if self.shared is None or session.id not in self.table:
            return
        record = record_of(session)
        if record != session.stored:
            session.stored = record
            await self.shared.save(session)

    async def remove(self, session_id: str) -> None:
        """Forget a session the client ended, here and (when shared) at every replica."""
        self.table.remove(session_id)
        if self.shared is not None:
            await self.shared.forget(session_id)
