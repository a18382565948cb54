"""The sessions of a federated route: the client's session at the gateway, and within it the
gateway's session with each target, opened at `initialize` and opened again when a target lost
it (it restarted) or was down at the time."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...asgi import CLAIMS_KEY, TOKEN_KEY, Scope
from ...controlplane.snapshot import CompiledTarget
from .backlog import EventLog
from .exchange import Exchanges

# Sessions held per route; past it the one idle the longest is forgotten (its client then gets
# a 404 and starts a new session, as MCP asks of a client whose session ended).
MAX_SESSIONS = 10_000
# Sessions held per caller (issuer and subject): past it, that caller's session idle the
# longest is forgotten, so one caller opening sessions in a loop cannot push out everyone's.
MAX_SESSIONS_PER_OWNER = 64


@dataclass
class TargetSession:
    """The gateway's session with one target, for one client session."""

    target: CompiledTarget
    # The target's Mcp-Session-Id (None: not open, or the target keeps no sessions).
    session_id: bytes | None = None
    # The protocol version the target agreed to; None while the session is not open.
    version: str | None = None
    capabilities: dict[str, object] = field(default_factory=dict)
    instructions: str = ""
    # One opening at a time: concurrent requests wait for it instead of opening their own.
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)
    # On the 2026-07-28 wire (no session): the request's routing headers, sent as they are,
    # and the target's answers with an HTTP error status read for the JSON-RPC error they hold.
    wire: tuple[tuple[bytes, bytes], ...] | None = None

    @property
    def open(self) -> bool:
        """Whether the target agreed to a session (initialize answered)."""
        return self.version is not None

    def close(self) -> None:
        """Forget the session (the target lost it, or is to be asked again)."""
        self.session_id = None
        self.version = None


Owner = tuple[object, object] | None
# What a caller whose token names no subject is known by, in place of one: its token's digest,
# tagged so that it equals no subject.
TOKEN_OWNER = "token-sha256"


def owner_of(scope: Scope) -> Owner:
    """Who a session belongs to: the verified token's issuer and subject (None on a route
    without authentication). A session id used by anyone else is unknown to them. A token
    without a subject (none, empty, or not a string) names no one: its session is that token's
    alone, never shared by every such caller of the issuer."""
    claims = scope.get(CLAIMS_KEY)
    if not isinstance(claims, dict):
        return None
    sub = claims.get("sub")
    if isinstance(sub, str) and sub:
        return (claims.get("iss"), sub)
    token = scope.get(TOKEN_KEY)
    digest = hashlib.sha256(str(token).encode()).hexdigest()
    return (claims.get("iss"), (TOKEN_OWNER, digest))


@dataclass
class ClientSession:
    """A client's session at the gateway: what it sent at initialize, and a session per
    target."""

    id: str
    owner: Owner
    # The client's initialize params, sent again to a target that is opened later.
    params: dict[str, object]
    targets: dict[str, TargetSession]
    version: str = ""
    # The client sent notifications/initialized: a target opened later is told at once.
    initialized: bool = False
    # The targets' requests to the client awaiting its answers, its requests in flight.
    exchanges: Exchanges = field(default_factory=Exchanges)
    # The client's GET stream is open (one at a time, as MCP servers keep it).
    listening: bool = False
    # Set to end the open GET stream (a client resuming it takes it over); set by the stream
    # once it ended.
    stop_listening: asyncio.Event = field(default_factory=asyncio.Event)
    listened: asyncio.Event = field(default_factory=asyncio.Event)
    # Its GET stream's events, when they are kept in this process (no Redis: `backlog`).
    backlog: EventLog = field(default_factory=EventLog)
    # When this replica last told Redis the session is in use (shared: `shared_limits`).
    touched_at: float = 0.0
    # While it is open here: the targets opened again since, to join it with their own.
    joining: asyncio.Queue[str] | None = None
    # What Redis was last given of it (shared: sessions across replicas), to store changes only.
    stored: dict[str, object] | None = None

    def open_targets(self) -> Iterator[TargetSession]:
        """The target sessions that are open, in the backend's order."""
        return (t for t in self.targets.values() if t.open)


def new_session(
    owner: Owner, params: dict[str, object], targets: tuple[CompiledTarget, ...]
) -> ClientSession:
    """A client session with an unguessable id and a closed session per target."""
    return ClientSession(
        id=secrets.token_urlsafe(32),
        owner=owner,
        params=params,
        targets={t.name: TargetSession(t) for t in targets},
    )


class SessionTable:
    """A route's client sessions by id, least recently used first: at most `limit` in all and
    `per_owner` for each caller."""

    def __init__(self, limit: int = MAX_SESSIONS, per_owner: int = MAX_SESSIONS_PER_OWNER):
        self.limit = limit
        self.per_owner = per_owner
        self._sessions: dict[str, ClientSession] = {}
        self._owned: dict[Owner, int] = {}

    def add(self, session: ClientSession) -> ClientSession | None:
        """Keep `session`; returns the session idle the longest when one had to be forgotten:
        the caller's own when it holds `per_owner`, else anyone's past `limit`."""
        evicted = None
        # Anonymous callers (no policy, or no token in Optional mode) are no one in particular:
        # only the route's limit holds them.
        named = session.owner is not None and session.owner[1] is not None
        if named and self._owned.get(session.owner, 0) >= self.per_owner:
            evicted = next(s for s in self._sessions.values() if s.owner == session.owner)
        elif len(self._sessions) >= self.limit:
            evicted = next(iter(self._sessions.values()))
        if evicted is not None:
            self.remove(evicted.id)
        self._sessions[session.id] = session
        self._owned[session.owner] = self._owned.get(session.owner, 0) + 1
        return evicted

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def find(self, session_id: str, owner: Owner) -> ClientSession | None:
        """The session with this id, if it is the caller's."""
        session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            return None
        # Last used, last forgotten: the limit drops the sessions idle the longest.
        self._sessions[session_id] = self._sessions.pop(session_id)
        return session

    def remove(self, session_id: str) -> None:
        """Forget a session (the client ended it)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        left = self._owned[session.owner] - 1
        if left:
            self._owned[session.owner] = left
        else:
            del self._owned[session.owner]
