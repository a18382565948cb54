"""The pool's response-head deadlines: each request in flight fails at its own deadline, with one
timer for all of them (not one per request)."""

from __future__ import annotations

import asyncio

import pytest

from mcp_oauth_gateway.proxy.deadlines import HeadDeadlines


async def test_each_request_fails_at_its_own_deadline_and_an_answered_one_never_does():
    loop = asyncio.get_running_loop()
    deadlines = HeadDeadlines(loop)
    slow, quick, answered = loop.create_future(), loop.create_future(), loop.create_future()
    deadlines.add(slow, 0.2)
    deadlines.add(quick, 0.05)
    deadlines.add(answered, 0.05)
    answered.set_result(None)
    deadlines.discard(answered)
    with pytest.raises(TimeoutError, match=r"within 0\.05s"):
        await quick
    with pytest.raises(TimeoutError, match=r"within 0\.2s"):
        await slow
    assert answered.result() is None
    assert deadlines.waiting == {}
    assert deadlines.timer is None  # nothing left in flight: no timer armed


async def test_requests_with_later_deadlines_share_the_armed_timer():
    loop = asyncio.get_running_loop()
    deadlines = HeadDeadlines(loop)
    first = loop.create_future()
    deadlines.add(first, 30)
    timer = deadlines.timer
    for _ in range(100):
        deadlines.add(loop.create_future(), 30)
    assert deadlines.timer is timer
    sooner = loop.create_future()
    deadlines.add(sooner, 0.01)  # an earlier deadline re-arms it
    assert deadlines.timer is not timer
    with pytest.raises(TimeoutError):
        await sooner
    assert len(deadlines.waiting) == 101
    assert deadlines.timer is not None  # armed again for the others
    deadlines.timer.cancel()
