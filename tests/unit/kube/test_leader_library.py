"""Why `kube/leader.py` is ours and not `kubernetes_asyncio.leaderelection`: shown on the
library itself, driven through its own lock interface.

The library's leader checks its renew deadline only between lock calls, so a call that hangs
(an API server that accepts the connection and never answers) keeps it leading with no timer
left that could end it; ours bounds each round by the deadline (see `test_leader.py`). It also
never gives the Lease up when stopped, and refuses periods under a second."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from kubernetes_asyncio.leaderelection import leaderelection
from kubernetes_asyncio.leaderelection.electionconfig import Config
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock.baselock import BaseLock


class HangingLock(BaseLock):
    """A Lease the first holder takes; once `hang` is set every call waits forever."""

    def __init__(self) -> None:
        super().__init__("lease", "ns", "replica-a")
        self.record: LeaderElectionRecord | None = None
        self.hang = asyncio.Event()
        self.hanging = asyncio.Event()
        self.updates = 0

    async def _maybe_hang(self) -> None:
        if self.hang.is_set():
            self.hanging.set()
            await asyncio.Event().wait()

    async def get(self, name: str, namespace: str) -> tuple[bool, LeaderElectionRecord | None]:  # type: ignore[override]
        await self._maybe_hang()
        return True, self.record

    async def create(
        self, name: str, namespace: str, election_record: LeaderElectionRecord
    ) -> bool:
        await self._maybe_hang()
        self.record = election_record
        return True

    async def update(self, name: str, namespace: str, updated_record: LeaderElectionRecord) -> bool:
        await self._maybe_hang()
        self.updates += 1
        self.record = updated_record
        return True


def _config(lock: HangingLock, started: asyncio.Event, stopped: asyncio.Event) -> Config:
    async def on_started() -> None:
        started.set()

    async def on_stopped() -> None:
        stopped.set()

    return Config(
        lock,
        lease_duration=3,
        renew_deadline=2,
        retry_period=1,
        onstarted_leading=on_started,
        onstopped_leading=on_stopped,
    )


async def test_the_librarys_leader_stays_leading_while_its_api_server_hangs(monkeypatch) -> None:
    lock, started, stopped = HangingLock(), asyncio.Event(), asyncio.Event()
    clock = [1_000.0]
    monkeypatch.setattr(leaderelection.time, "time", lambda: clock[0])
    task = asyncio.create_task(leaderelection.LeaderElection(_config(lock, started, stopped)).run())
    try:
        async with asyncio.timeout(10):  # a guard against a hang, not a timing assertion
            await started.wait()
            lock.hang.set()
            await lock.hanging.wait()
        # Far past the renew deadline and the Lease's own duration: nothing in the library is
        # left to notice, because the only thing it waits on is the lock call that hangs.
        clock[0] += 3_600
        for _ in range(100):
            await asyncio.sleep(0)
        assert not stopped.is_set()
        assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_librarys_leader_never_gives_the_lease_up_when_stopped() -> None:
    lock, started, stopped = HangingLock(), asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(leaderelection.LeaderElection(_config(lock, started, stopped)).run())
    async with asyncio.timeout(10):
        await started.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # The record still names the stopped replica: the next one waits out the whole Lease.
    assert lock.record is not None
    assert lock.record.holder_identity == "replica-a"
    assert not stopped.is_set()


def test_the_library_refuses_periods_under_a_second() -> None:
    async def nothing() -> None:
        return None

    with pytest.raises(ValueError, match="retry_period"):
        Config(
            HangingLock(),
            lease_duration=3,
            renew_deadline=2,
            retry_period=0.5,
            onstarted_leading=nothing,
            onstopped_leading=nothing,
        )
