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
at that very target."""

from __future__ import annotations

import itertools
from collections.abc import Collection

from . import jsonrpc

# Server-to-client requests a session keeps waiting for an answer; past it, the oldest is
# forgotten (its answer is then refused as unknown, and the target times it out itself).
MAX_ASKED = 1_000
# Client requests in flight a session keeps for cancellation; past it, the oldest is forgotten
# (cancelling it is then dropped, as for a request already answered).
MAX_RUNNING = 1_000


def _key(request_id: object) -> bytes:
    """A JSON-RPC id as a key that keeps 1 and "1" apart (and true apart from 1)."""
    return jsonrpc.dumps(request_id)


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

    def ask(self, target: str, own_id: object) -> str:
        """The id under which the client gets `target`'s request `own_id`."""
        minted = f"{target}/{next(self._numbers)}"
        if len(self._asked) >= self.asked_limit:
            self.answer(next(iter(self._asked)))
        self._asked[minted] = (target, own_id)
        self._minted[(target, _key(own_id))] = minted
        return minted

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

    def finish(self, request_id: object) -> None:
        """The client's request `request_id` was answered."""
        self._stop(_key(request_id))

    def targets_of(self, request_id: object) -> tuple[str, ...]:
        """The targets the client's request in flight went to (none once answered)."""
        running = self._running.get(_key(request_id))
        return running[0] if running is not None else ()

    def in_flight_at(self, target: str, progress: object) -> bool:
        """Whether a client request in flight at `target` asked progress under the token
        `progress` (same type and value)."""
        return progress is not None and (target, _key(progress)) in self._progress

    def _stop(self, key: bytes) -> None:
        targets, token = self._running.pop(key, ((), None))
        if token is None:
            return
        for target in set(targets):
            held = (target, token)
            left = self._progress[held] - 1
            if left:
                self._progress[held] = left
            else:
                del self._progress[held]
