"""Reaching a client session's targets: several in parallel (a target that fails is named, not
raised), or one with its session opened first when it is not open or the target lost it.

A target's GET stream refused with 409 (the target still holds the session's previous stream:
the client left it, or resumed it at another replica, a moment ago, and the target has not
noticed yet) is asked again a few times, STREAM_BUSY_PAUSES apart."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

from ... import jsonrpc
from ...asgi import Scope
from ..upstream import UpstreamResponse
from .backlog import Cursor
from .health import Health
from .session import ClientSession, TargetSession
from .target import Refused, SessionGone, TargetLink, Unavailable

log = logging.getLogger("mcp_oauth_gateway.federation")
T = TypeVar("T")
# Seconds between a target's GET stream refused as already open and the next try.
STREAM_BUSY_PAUSES = (0.1, 0.2, 0.4, 0.8, 1.6)


class Fanout:
    """A federated route's ways to its targets, over one `TargetLink`; what each exchange made
    of a target goes into `health`."""

    def __init__(self, link: TargetLink, health: Health | None = None):
        self.link = link
        self.health = health if health is not None else Health()

    async def each(
        self,
        session: ClientSession,
        action: Callable[[TargetSession], Awaitable[object]],
        every: bool = False,
        only: Collection[str] | None = None,
    ) -> dict[str, Unavailable]:
        """Run `action` on every target (`every`) or every open one (of `only`), in parallel;
        what failed (each target's outcome noted in its health)."""
        chosen = list(session.targets.values()) if every else list(session.open_targets())
        if only is not None:
            chosen = [t for t in chosen if t.target.name in only]
        outcomes = await asyncio.gather(*(action(t) for t in chosen), return_exceptions=True)
        failures: dict[str, Unavailable] = {}
        for target, outcome in zip(chosen, outcomes, strict=True):
            name = target.target.name
            if isinstance(outcome, Unavailable):
                log.info("federated target %s: %s", name, outcome)
                self.health.failed(name, outcome)
                failures[name] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                self.health.ok(name)
        return failures

    async def reopened(
        self,
        scope: Scope,
        session: ClientSession,
        target: TargetSession,
        action: Callable[[], Awaitable[T]],
    ) -> T:
        """`action` on the target, its session opened first when it is not (or no longer) open."""
        for attempt in (1, 2):
            if not target.open:
                async with target.opening:
                    if not target.open:
                        await self.link.open(scope, target, session.params, session.initialized)
                        if session.joining is not None:
                            session.joining.put_nowait(target.target.name)
            try:
                return await action()
            except SessionGone:
                target.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def ask(
        self,
        scope: Scope,
        session: ClientSession,
        target: TargetSession,
        message: dict[str, object],
    ) -> dict[str, object]:
        """The target's response to the request `message` (its session reopened if need be)."""
        body = jsonrpc.write_message(message)
        request_id = message.get("id")

        async def ask() -> dict[str, object]:
            return (await self.link.ask(scope, target, body, request_id))[0]

        return await self.reopened(scope, session, target, ask)

    async def listen(
        self, scope: Scope, session: ClientSession, cursors: dict[str, Cursor] | None = None
    ) -> dict[str, UpstreamResponse]:
        """Each target's GET stream, opened in parallel (a target's session first if it is not
        open), resumed from its cursor while it is the same session's; a target with none, or
        that fails, is left out."""
        opened: dict[str, UpstreamResponse] = {}

        async def listen(target: TargetSession) -> None:
            async def get() -> UpstreamResponse:
                return await self._listen(scope, target, _cursor(target, cursors))

            # A target with none (NoStream) is an Unavailable like any that fails.
            opened[target.target.name] = await self.reopened(scope, session, target, get)

        await self.each(session, listen, every=True)
        return opened

    async def _listen(
        self, scope: Scope, target: TargetSession, cursor: str | None
    ) -> UpstreamResponse:
        """The target's GET stream, asked again while it says one is already open."""
        for pause in (*STREAM_BUSY_PAUSES, None):
            try:
                return await self.link.listen(scope, target, cursor)
            except Refused as exc:
                if exc.status != 409 or pause is None:
                    raise
            log.info(
                "federated target %s: its GET stream is still open: asked again", target.target.name
            )
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def stream_of(
        self, scope: Scope, target: TargetSession, cursor: str | None = None
    ) -> UpstreamResponse | None:
        """The GET stream of a target opened again while the client's is open, or resumed
        after its own event id `cursor` (None when it offers none, or fails: noted in its
        health)."""
        name = target.target.name
        try:
            response = await self._listen(scope, target, cursor)
        except Unavailable as exc:
            self.health.failed(name, exc)
            return None
        self.health.ok(name)
        return response

    async def end(self, scope: Scope, session: ClientSession) -> None:
        """End every target's session (a target that fails is left to expire it; one that
        keeps no sessions has nothing to end)."""

        async def end(target: TargetSession) -> None:
            if target.session_id is not None:
                await self.link.tell(scope, target, b"")

        await self.each(session, end)


def _cursor(target: TargetSession, cursors: dict[str, Cursor] | None) -> str | None:
    """The target's cursor, if it belongs to the target's session as it is now."""
    held = (cursors or {}).get(target.target.name)
    if held is None or not target.open:
        return None
    current = target.session_id.decode("latin-1") if target.session_id is not None else None
    return held[1] if held[0] == current else None
