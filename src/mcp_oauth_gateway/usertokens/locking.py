"""The cross-process lock both stores offer: taken with a random token and an expiry, waited for
by polling, given back only by its holder. The stores say how to take and give (`Take`,
`Give`); this module says when."""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

log = logging.getLogger("mcp_oauth_gateway.usertokens")

# Polling starts fast (a refresh is usually quick) and backs off to this.
_FIRST_PAUSE = 0.005
_LONGEST_PAUSE = 0.2

Take = Callable[[str, str, float], Awaitable[bool]]  # (name, token, ttl) -> taken
Give = Callable[[str, str], Awaitable[None]]  # (name, token): only when still the token's


class StoreError(Exception):
    """The store cannot be reached or used; the message names it and why."""


class LockTimeout(StoreError):
    """Another holder kept the lock for longer than the caller would wait."""


def check_ttl(ttl: float, what: str) -> float:
    """`ttl` when it is a positive number of seconds; ValueError otherwise."""
    if not (isinstance(ttl, int | float) and math.isfinite(ttl) and ttl > 0):
        raise ValueError(f"{what} is a positive number of seconds, not {ttl!r}")
    return float(ttl)


@asynccontextmanager
async def held(
    take: Take, give: Give, name: str, ttl: float, wait: float | None
) -> AsyncIterator[None]:
    """Hold lock `name` for the body (or until `ttl` runs out); LockTimeout after `wait`."""
    check_ttl(ttl, "a lock's ttl")
    limit = ttl if wait is None else wait
    token = secrets.token_hex(16)
    try:
        await _taken(take, name, token, ttl, limit)
    except asyncio.CancelledError:
        # The take may have landed before the cancellation did: give it back.
        await asyncio.shield(_given(give, name, token))
        raise
    try:
        yield
    finally:
        await _given(give, name, token)


async def _taken(take: Take, name: str, token: str, ttl: float, limit: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    pause = _FIRST_PAUSE
    while not await take(name, token, ttl):
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise LockTimeout(
                f"lock {name!r} is held by another process for longer than {limit:g} s"
            )
        await asyncio.sleep(min(pause, remaining))
        pause = min(pause * 2, _LONGEST_PAUSE)


async def _given(give: Give, name: str, token: str) -> None:
    """Give the lock back; when the store cannot be reached it expires by itself."""
    try:
        await give(name, token)
    except StoreError as exc:
        log.warning("lock %r not given back (it expires by itself): %s", name, exc)
