"""A federated route rule's client sessions kept in Redis beside the Broker's state, so a client's
`Mcp-Session-Id` works at every replica using the same Redis.

What is stored, per session (JSON under
`mcp-oauth-gateway:federation:<route>:<rule>:session:<id>`, with a TTL refreshed on every use):
its owner (issuer and subject, or its token's digest when it has no subject), the client's
initialize params, the protocol version agreed, whether the client said it is initialized, and
per target its session id and version. Never the client's token or headers: each request
brings its own. Beside it, under the session's hash tag (`…:session:{<id>}:…`, one Cluster slot):
its GET stream's kept events and the targets' cursors (`shared_backlog`), the targets' requests
to the client and the client's requests in flight (`shared_exchanges`). For the rule: its
session limits (`shared_limits`) and its targets' health (`shared_health`).

What stays in the process that has it: the session's locks and its open GET stream. A replica
that does not hold a session it finds here rebuilds it on first use, its targets' sessions
reused by id; a client resuming its GET stream at another replica gets what it missed there
(`backlog`); its answer to a target's request, or its cancellation, is taken at any replica.

Redis not answering: a session this replica holds goes on here; one it does not is unknown
here (404: the client starts a new one); a new session is refused (503, see `shared_limits`)."""

from __future__ import annotations

import logging
import secrets
from typing import Any

import orjson
from redis.exceptions import RedisError

from ...controlplane.snapshot import CompiledTarget
from ...redis_clients import RedisConnection
from .cursor import Cursors
from .session import ClientSession, Owner, TargetSession
from .shared_backlog import SharedBacklog
from .shared_exchanges import SharedExchanges
from .shared_health import SharedHealth
from .shared_limits import SharedLimits

log = logging.getLogger("mcp_oauth_gateway.federation")

PREFIX = "mcp-oauth-gateway:federation:"
# How long a session unused at every replica stays in Redis.
SESSION_TTL = 3600


def record_of(session: ClientSession) -> dict[str, Any]:
    """What another replica needs to serve `session`."""
    return {
        "owner": list(session.owner) if session.owner is not None else None,
        "params": session.params,
        "version": session.version,
        "initialized": session.initialized,
        "targets": {
            name: {
                "session": t.session_id.decode("latin-1") if t.session_id is not None else None,
                "version": t.version,
            }
            for name, t in session.targets.items()
        },
    }


def _owner(value: object) -> Owner:
    if isinstance(value, list) and len(value) == 2:
        # A caller known by its token's digest (session.owner_of) is a pair too.
        who = value[1]
        return (value[0], tuple(who) if isinstance(who, list) else who)
    return None


def session_from(
    session_id: str, record: dict[str, Any], targets: tuple[CompiledTarget, ...]
) -> ClientSession | None:
    """The session a record describes, over the route's targets now (one it does not name is
    closed, to be opened on first use); None when the record is not one."""
    params, stored = record.get("params"), record.get("targets")
    if not isinstance(params, dict) or not isinstance(stored, dict):
        return None
    sessions: dict[str, TargetSession] = {}
    for target in targets:
        seen = stored.get(target.name)
        sessions[target.name] = own = TargetSession(target)
        if isinstance(seen, dict) and isinstance(seen.get("version"), str):
            found = seen.get("session")
            own.session_id = found.encode("latin-1") if isinstance(found, str) else None
            own.version = seen["version"]
    version = record.get("version")
    return ClientSession(
        id=session_id,
        owner=_owner(record.get("owner")),
        params=params,
        targets=sessions,
        version=version if isinstance(version, str) else "",
        initialized=record.get("initialized") is True,
    )


def adopt(session: ClientSession, record: dict[str, Any]) -> None:
    """Take what another replica changed of a session this one holds: a target session it
    opened again (its target had lost the old one), and the client's `initialized`. Without
    this, this replica would go on sending the old id, be told 404, and open yet another."""
    stored = record.get("targets")
    for name, own in session.targets.items():
        seen = stored.get(name) if isinstance(stored, dict) else None
        if not isinstance(seen, dict) or not isinstance(seen.get("version"), str):
            continue  # closed there (it failed there): this replica's view stands
        found = seen.get("session")
        own.session_id = found.encode("latin-1") if isinstance(found, str) else None
        own.version = seen["version"]
    session.initialized = session.initialized or record.get("initialized") is True
    session.stored = record


class SharedSessions(SharedBacklog, SharedExchanges, SharedLimits, SharedHealth):
    """A route rule's sessions in Redis. Every failure to reach Redis is logged and taken as
    "not there": a session is then served by the replica holding it, or started anew."""

    def __init__(self, connection: RedisConnection, route: str, rule: int, ttl: int = SESSION_TTL):
        self.connection = connection
        self.url = connection.url
        self.ttl = ttl
        self.namespace = f"{PREFIX}{route}:{rule}:"
        self._client = connection.client
        self._keyed = False

    def _key(self, session_id: str) -> str:
        return f"{self.namespace}session:{session_id}"

    async def save(self, session: ClientSession) -> None:
        """Store the session as it is now (its TTL starts again)."""
        try:
            await self._client.set(
                self._key(session.id), orjson.dumps(record_of(session)), ex=self.ttl
            )
        except (RedisError, OSError) as exc:  # the session lives on at this replica
            log.warning("federated session not stored in Redis: %s", exc)

    async def load(self, session_id: str) -> dict[str, Any] | None:
        """The session's record, its TTL started again; None when Redis has none."""
        try:
            raw = await self._client.getex(self._key(session_id), ex=self.ttl)
        except (RedisError, OSError) as exc:  # unknown here, as without Redis
            log.warning("federated session not read from Redis: %s", exc)
            return None
        if raw is None:
            return None
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        return record if isinstance(record, dict) else None

    async def current(self, session_id: str) -> tuple[bool, dict[str, Any] | None]:
        """Whether Redis still has the session (its TTL started again), and its record as
        another replica may have changed it: (False, None) once it was ended at another
        replica or expired; (True, None) when Redis cannot be asked."""
        try:
            raw = await self._client.getex(self._key(session_id), ex=self.ttl)
        except (RedisError, OSError) as exc:  # the replica's own copy stands
            log.warning("federated session not refreshed in Redis: %s", exc)
            return True, None
        if raw is None:
            return False, None
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return True, None
        return True, record if isinstance(record, dict) else None

    async def forget(self, session_id: str) -> None:
        """End the session at every replica."""
        try:
            await self._client.delete(self._key(session_id))
        except (RedisError, OSError) as exc:  # it expires with its TTL
            log.warning("federated session not removed from Redis: %s", exc)

    async def drop(self, session_id: str) -> None:
        """End the session at every replica, with what it kept beside its record."""
        await self.forget(session_id)
        await self.forget_backlog(session_id)
        await self.forget_exchanges(session_id)

    async def end(self, session_id: str, owner: Owner) -> None:
        """`drop` the session and count it out of its limits."""
        await self.drop(session_id)
        await self.release(session_id, owner)

    async def share_key(self, cursors: Cursors) -> None:
        """Sign cursors with the key every replica reads from Redis (made by the first), so a
        list goes on at any of them; until Redis answers, the process's own key stays."""
        if self._keyed:
            return
        key = f"{self.namespace}cursor-key"
        try:
            await self._client.set(key, secrets.token_bytes(32), nx=True)
            stored = await self._client.get(key)
        except (RedisError, OSError) as exc:  # this replica's cursors only, for now
            log.warning("federated cursor key not read from Redis: %s", exc)
            return
        if isinstance(stored, bytes) and len(stored) == 32:
            cursors.key = stored
            self._keyed = True

    async def close(self) -> None:
        """Nothing: the connection is the process's (RedisConnections closes it)."""
