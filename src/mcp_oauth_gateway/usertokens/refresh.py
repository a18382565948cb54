"""One refresh at a time per grant within a process: callers asking while one runs share it.
Across processes the store's lock (`GrantStore.lock`) does the same; the caller combines the
two, so a rotated refresh token is spent once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")


class SingleFlight:
    """Runs of `fn` by key: concurrent callers of one key share one run, its result or its
    exception. A caller cancelled while waiting leaves the run to the others (and to its end:
    a refresh that reached the authorization server must still store what it got)."""

    def __init__(self) -> None:
        self._runs: dict[str, asyncio.Task[Any]] = {}

    async def run(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        """`fn()`'s result, from the run already under way for `key` or from a new one."""
        task = self._runs.get(key)
        if task is None:
            task = asyncio.ensure_future(fn())
            self._runs[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        return cast(T, await asyncio.shield(task))

    def running(self, key: str) -> bool:
        """Whether a run for `key` is under way."""
        return key in self._runs

    def _finished(self, key: str, task: asyncio.Task[Any]) -> None:
        if self._runs.get(key) is task:
            del self._runs[key]
        # Retrieved here too, so a run every caller left raises no "never retrieved" warning.
        if not task.cancelled():
            task.exception()
