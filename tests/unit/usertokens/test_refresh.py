"""SingleFlight: callers of one key while a run is under way share it (one call of the function,
its result or its exception for all); another key runs apart; a finished run is not reused; a
caller cancelled while waiting leaves the run to the others, and a run every caller left still
ends (a refresh that reached the authorization server must store what it got)."""

from __future__ import annotations

import asyncio

import pytest

from mcp_oauth_gateway.usertokens import SingleFlight


class Gate:
    """A run that counts its calls and ends when the test says."""

    def __init__(self) -> None:
        self.calls = 0
        self.open = asyncio.Event()
        self.finished = 0

    async def run(self) -> str:
        self.calls += 1
        await self.open.wait()
        self.finished += 1
        return f"result {self.calls}"


async def until(condition, what: str) -> None:
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0)
    assert condition(), what


async def test_concurrent_callers_of_one_key_share_one_run():
    flight, gate = SingleFlight(), Gate()
    callers = [asyncio.ensure_future(flight.run("alice/github", gate.run)) for _ in range(5)]
    await until(lambda: gate.calls == 1, "the run to start")
    assert flight.running("alice/github")
    gate.open.set()
    assert await asyncio.gather(*callers) == ["result 1"] * 5
    assert gate.calls == 1
    assert not flight.running("alice/github")
    assert await flight.run("alice/github", gate.run) == "result 2", "a finished run is not reused"


async def test_another_key_runs_apart():
    flight, alice, bob = SingleFlight(), Gate(), Gate()
    first = asyncio.ensure_future(flight.run("alice", alice.run))
    second = asyncio.ensure_future(flight.run("bob", bob.run))
    await until(lambda: alice.calls == bob.calls == 1, "both runs to start")
    bob.open.set()
    assert await second == "result 1"
    assert not first.done()
    alice.open.set()
    assert await first == "result 1"


async def test_every_caller_gets_the_runs_exception():
    flight = SingleFlight()
    started, fail = asyncio.Event(), asyncio.Event()
    calls = 0

    async def refresh() -> str:
        nonlocal calls
        calls += 1
        started.set()
        await fail.wait()
        raise PermissionError("invalid_grant")

    callers = [asyncio.ensure_future(flight.run("k", refresh)) for _ in range(3)]
    await started.wait()
    fail.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert [type(r) for r in results] == [PermissionError] * 3
    assert calls == 1
    with pytest.raises(PermissionError):
        await flight.run("k", refresh)
    assert calls == 2


async def test_a_cancelled_caller_leaves_the_run_to_the_others():
    flight, gate = SingleFlight(), Gate()
    first = asyncio.ensure_future(flight.run("k", gate.run))
    second = asyncio.ensure_future(flight.run("k", gate.run))
    await until(lambda: gate.calls == 1, "the run to start")
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    gate.open.set()
    assert await second == "result 1"


async def test_a_run_every_caller_left_still_ends():
    flight, gate = SingleFlight(), Gate()
    only = asyncio.ensure_future(flight.run("k", gate.run))
    await until(lambda: gate.calls == 1, "the run to start")
    only.cancel()
    with pytest.raises(asyncio.CancelledError):
        await only
    gate.open.set()
    await until(lambda: gate.finished == 1, "the run to end")
    await until(lambda: not flight.running("k"), "the run to be forgotten")
