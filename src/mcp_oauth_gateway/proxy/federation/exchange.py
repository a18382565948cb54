"""What a client session remembers to route the messages that name no item: the requests its
targets sent the client (sampling, elicitation, roots), and the client's requests in flight.

A target's request reaches the client under an id the gateway mints, `<target>/<n>`, and the
session keeps which target asked and under which id of its own. The client's answer is routed by
looking its id up in its own session's map, never by reading a target out of it: an id the
session did not mint (forged, answered twice, or another session's) finds nothing, so a client
can only ever answer its own session's targets. The target's name is in the id for people
reading a trace, not for the gateway.

A client's request in flight is kept with the targets it went to, so `notifications/cancelled`
reaches those and no other, and with the progress token it asked progress under, so progress a
target sends outside the call's own stream (on the GET stream) passes only for a call in flight
at that very target.

Shared across replicas (`share`, with the session's Redis: `shared_exchanges`), both maps are
also written there, before the client can act on them (`settle`): the client's answer is taken
from Redis at whichever replica gets it (once: the first to take it), a cancellation of a
request in flight at another replica reaches its targets, and a target that withdraws its request
on a stream another replica now relays is understood. Ids minted at different replicas differ
(each session copy mints under a random tag of its own). When Redis did not take a request's id,
only the replica that minted it takes the answer, as without Redis."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

from ... import jsonrpc
from ...redis_clients import RedisUnavailable

log = logging.getLogger("mcp_oauth_gateway.federation")

# Server-to-client requests a session keeps waiting for an answer; past it, the oldest is
# forgotten (its answer is then refused as unknown, and the target times it out itself).
MAX_ASKED = 1_000
# Client requests in flight a session keeps for cancellation; past it, the oldest is forgotten
# (cancelling it is then dropped, as for a request already answered).
MAX_RUNNING = 1_000


def _key(request_id: object) -> bytes:
    """A JSON-RPC id as a key that keeps 1 and "1" apart (and true apart from 1)."""
    return jsonrpc.write_message(request_id)


class ExchangeStore(Protocol):
    """Where a session's exchanges are shared with other replicas (its Redis)."""

    async def asked(self, session_id: str, minted: str, target: str, own: bytes) -> bool:
        """Keep `target`'s request (`own`: its id as a key) under `minted`; False if not kept."""
        ...

    async def taken(self, session_id: str, minted: str) -> tuple[str, bytes] | None:
        """The request answered under `minted`, forgotten (None: not there); raises
        RedisUnavailable when Redis did not answer."""
        ...

    async def withdrawn(self, session_id: str, target: str, own: bytes) -> str | None:
        """The id `target`'s request was minted under, forgotten (None: not there)."""
        ...

    async def started(
        self, session_id: str, request: bytes, targets: tuple[str, ...], progress: bytes | None
    ) -> None:
        """The client's request went to `targets`."""
        ...

    async def finished(self, session_id: str, request: bytes) -> None:
        """The client's request was answered."""
        ...

    async def running(self, session_id: str, request: bytes) -> tuple[str, ...]:
        """The targets the client's request in flight went to, at any replica."""
        ...

    async def progressing(self, session_id: str, target: str, progress: bytes) -> bool:
        """Whether a request in flight at `target`, at any replica, asked under `progress`."""
        ...


class Exchanges:
    """One client session's server-to-client requests and client requests in flight."""

    def __init__(self, asked_limit: int = MAX_ASKED, running_limit: int = MAX_RUNNING):
        self.asked_limit = asked_limit
        self.running_limit = running_limit
        self._numbers = itertools.count(1)
        # gateway id -> (target, the target's own id)
        self._asked: dict[str, tuple[str, object]] = {}
        # (target, the target's own id as a key) -> gateway id, to cancel by the target's id
        self._minted: dict[tuple[str, bytes], str] = {}
        # the client's request id as a key -> the targets it went to, its progress token's key
        self._running: dict[bytes, tuple[tuple[str, ...], bytes | None]] = {}
        # (target, progress token as a key) -> how many requests in flight there asked under it
        self._progress: dict[tuple[str, bytes], int] = {}
        # Shared: where, under which session id, what is still to be written, and the ids
        # Redis took (only those are taken from it).
        self.store: ExchangeStore | None = None
        self.session_id = ""
        self._tag = ""
        self._pending: list[Callable[[], Awaitable[None]]] = []
        self._settling = asyncio.Lock()
        self._stored: set[str] = set()

    def share(self, store: ExchangeStore, session_id: str) -> None:
        """Share this session's exchanges with the other replicas through `store`."""
        self.store = store
        self.session_id = session_id
        self._tag = secrets.token_hex(4) + "-"

    def ask(self, target: str, own_id: object) -> str:
        """The id under which the client gets `target`'s request `own_id`."""
        minted = f"{target}/{self._tag}{next(self._numbers)}"
        if len(self._asked) >= self.asked_limit:
            self.answer(next(iter(self._asked)))
        self._asked[minted] = (target, own_id)
        self._minted[(target, _key(own_id))] = minted
        if self.store is not None:
            self._later(self._share_asked, minted, target, _key(own_id))
        return minted

    async def _share_asked(self, minted: str, target: str, own: bytes) -> None:
        assert self.store is not None
        if await self.store.asked(self.session_id, minted, target, own):
            self._stored.add(minted)

    def _later(self, write: Callable[..., Awaitable[object]], *args: object) -> None:
        async def run() -> None:
            await write(*args)

        self._pending.append(run)

    async def settle(self) -> None:
        """Write what other replicas must know before the client hears of it (the requests
        minted, those answered or withdrawn, the client's requests started or finished)."""
        if not self._pending:
            return
        # One writer at a time: a caller returns once its own writes are done, whoever ran them.
        async with self._settling:
            pending, self._pending = self._pending, []
            for write in pending:
                await write()

    async def take(self, minted: object) -> tuple[str, object] | None:
        """`answer`, at any replica sharing the session: the first to take an id gets it."""
        local = self.answer(minted)
        if self.store is None or not isinstance(minted, str):
            return local
        if local is not None and minted not in self._stored:
            return local  # Redis never had it: only this replica could take it
        self._stored.discard(minted)
        try:
            found = await self.store.taken(self.session_id, minted)
        except RedisUnavailable:
            return local
        if found is None:
            return None
        return found[0], jsonrpc.read_message(found[1])

    async def recall(self, target: str, own_id: object) -> None:
        """Learn from the other replicas the id `target`'s request `own_id` went to the client
        under, when this replica did not mint it (the target withdraws it)."""
        key = (target, _key(own_id))
        if self.store is None or key in self._minted:
            return
        minted = await self.store.withdrawn(self.session_id, target, key[1])
        if minted is not None:
            self._asked[minted] = (target, own_id)
            self._minted[key] = minted

    async def cancelled(self, request_id: object) -> tuple[str, ...]:
        """`targets_of`, at any replica sharing the session."""
        found = self.targets_of(request_id)
        if found or self.store is None:
            return found
        return await self.store.running(self.session_id, _key(request_id))

    async def progress_elsewhere(self, target: str, progress: object) -> bool:
        """Whether a request in flight at `target` at another replica asked under `progress`."""
        if self.store is None or progress is None:
            return False
        return await self.store.progressing(self.session_id, target, _key(progress))

    def answer(self, minted: object) -> tuple[str, object] | None:
        """(target, its own id) of the request the client answers (once); None for an id this
        session never minted or already had answered."""
        if not isinstance(minted, str):
            return None
        asked = self._asked.pop(minted, None)
        if asked is not None:
            self._minted.pop((asked[0], _key(asked[1])), None)
        return asked

    def withdraw(self, target: str, own_id: object) -> str | None:
        """The id the client knows `target`'s request `own_id` by, forgotten (the target
        cancelled it); None when the client never got it."""
        minted = self._minted.pop((target, _key(own_id)), None)
        if minted is not None:
            self._asked.pop(minted, None)
            if self.store is not None:
                self._later(self.store.withdrawn, self.session_id, target, _key(own_id))
        return minted

    def start(self, request_id: object, targets: Collection[str], progress: object = None) -> None:
        """The client's request `request_id` went to `targets`, asking progress under the
        token `progress` (None: it asked for none)."""
        self._stop(_key(request_id))
        if len(self._running) >= self.running_limit:
            self._stop(next(iter(self._running)))
        token = None if progress is None else _key(progress)
        self._running[_key(request_id)] = (tuple(targets), token)
        if token is not None:
            for target in set(targets):
                held = (target, token)
                self._progress[held] = self._progress.get(held, 0) + 1
        if self.store is not None:
            started = self.store.started
            self._later(started, self.session_id, _key(request_id), tuple(targets), token)

    def finish(self, request_id: object) -> None:
        """The client's request `request_id` was answered."""
        if self._stop(_key(request_id)) and self.store is not None:
            self._later(self.store.finished, self.session_id, _key(request_id))

    def targets_of(self, request_id: object) -> tuple[str, ...]:
        """The targets the client's request in flight went to (none once answered)."""
        running = self._running.get(_key(request_id))
        return running[0] if running is not None else ()

    def in_flight_at(self, target: str, progress: object) -> bool:
        """Whether a client request in flight at `target` asked progress under the token
        `progress` (same type and value)."""
        return progress is not None and (target, _key(progress)) in self._progress

    def _stop(self, key: bytes) -> bool:
        """Forget a request in flight; whether it was."""
        if key not in self._running:
            return False
        targets, token = self._running.pop(key)
        if token is None:
            return True
        for target in set(targets):
            held = (target, token)
            left = self._progress[held] - 1
            if left:
                self._progress[held] = left
            else:
                del self._progress[held]
        return True
