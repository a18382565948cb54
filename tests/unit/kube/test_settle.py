"""When the controller builds after a change (`Controller._settle`): once changes to what the
builder reads stop arriving, whatever else the watches deliver meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

from mcp_oauth_gateway.kube import controller
from mcp_oauth_gateway.kube.cache import ObjectCache


def settling(cache: ObjectCache) -> SimpleNamespace:
    """What `_settle` reads of a controller: its cache and the version the builder reads."""
    return SimpleNamespace(cache=cache, _version=lambda: (cache.content_version, ()))


async def status_writes(cache: ObjectCache) -> None:
    """This replica's own status writes coming back as watch events, without end."""
    while True:
        cache._bump(content_changed=False)
        await asyncio.sleep(0)  # one every turn of the loop: never a quiet moment


async def test_status_events_do_not_hold_back_a_change(monkeypatch) -> None:
    # No upper bound: only the quiet time can end the wait.
    monkeypatch.setattr(controller, "SETTLE_AT_MOST", 3600.0)
    cache = ObjectCache([])
    writes = asyncio.create_task(status_writes(cache))
    settle = asyncio.create_task(controller.Controller._settle(settling(cache)))  # type: ignore[arg-type]
    # A guard against a hang, not a timing assertion: unfixed, it waits as long as they come.
    done, _ = await asyncio.wait({settle}, timeout=10)
    still_writing = not writes.done()
    writes.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await writes
    await settle
    assert settle in done, "the change waited while only status events arrived"
    assert still_writing
