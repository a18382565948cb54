"""A task told to stop stops, even when what it waited for arrives in the same turn of the loop.

On Python 3.11, `asyncio.wait_for` returns the result instead of raising when the task is
cancelled just as the awaited thing completes: the cancellation is lost and the task runs on
(a config watcher polled forever after `stop()`, hanging the test that stopped it; a gateway
draining on SIGTERM would have hung the same way). `asyncio.timeout` keeps the cancellation."""

from __future__ import annotations

import asyncio
import re

from mcp_oauth_gateway.controlplane import watch
from mcp_oauth_gateway.controlplane.builder import build_snapshot
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.resources.loader import load_paths
from mcp_oauth_gateway.useroauth.streams import Listener
from support import ROOT

from .resources_fixture import BASE, policy


async def waiting_on(event: asyncio.Event) -> None:
    """Until a task waits on `event` (asyncio.Event keeps its waiters in `_waiters`)."""
    async with asyncio.timeout(20):
        while not event._waiters:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)


def test_no_source_waits_with_asyncio_wait_for():
    uses = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bwait_for\(", line)
    ]
    assert not uses, f"use `async with asyncio.timeout(...)` instead (see this module): {uses}"


async def test_a_watcher_stops_when_its_wake_comes_with_the_stop(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "base.yaml").write_text(BASE)
    (config / "policy.yaml").write_text(policy())
    control = ControlPlane(build_snapshot(load_paths([config])))
    watcher = watch.ConfigWatcher([str(config)], control, interval=30)
    watcher.start()
    await waiting_on(watcher._wake)
    watcher._wake.set()  # a writer's close, in the same turn as the stop
    async with asyncio.timeout(10):
        await watcher.stop()


async def test_a_stream_stops_waiting_when_woken_as_it_closes():
    calls = 0

    async def finished(eid: str) -> bool:
        nonlocal calls
        calls += 1
        return False

    async def send(message: object) -> None:
        return None

    listener = Listener(send)
    task = listener.watch("e1", finished)
    assert task is not None
    await waiting_on(listener.wake)
    assert calls == 1
    listener.wake.set()  # a page done on this replica, in the same turn as the close
    listener.close()
    async with asyncio.timeout(10):
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
