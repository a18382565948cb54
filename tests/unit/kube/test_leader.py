"""Leader election decisions: renew what is mine, take what is free or expired (by the local
clock since it last changed), follow a live holder."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from mcp_oauth_gateway.kube.client import ApiError
from mcp_oauth_gateway.kube.leader import LeaderElection, Observed, decide, lease_spec


def test_free_or_missing_lease_is_acquired() -> None:
    assert decide(None, "a", 0.0) == "acquire"
    assert decide(Observed("1", "", 10, 0.0), "a", 0.0) == "acquire"


def test_own_lease_is_renewed() -> None:
    assert decide(Observed("1", "a", 10, 0.0), "a", 100.0) == "renew"


def test_live_lease_of_another_is_followed_until_it_stops_changing_for_its_duration() -> None:
    lease = Observed("1", "b", 10, 50.0)
    assert decide(lease, "a", 59.9) == "follow"
    assert decide(lease, "a", 60.0) == "acquire"


def test_taking_over_counts_a_transition_and_sets_the_acquire_time() -> None:
    previous = {"holderIdentity": "b", "leaseTransitions": 4, "acquireTime": "old"}
    spec = lease_spec("a", 10, 0.0, previous)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseTransitions"] == 5
    assert spec["acquireTime"] == spec["renewTime"] == "1970-01-01T00:00:00.000000Z"
    assert spec["leaseDurationSeconds"] == 10


def test_renewing_keeps_the_acquire_time_and_transitions() -> None:
    previous = {"holderIdentity": "a", "leaseTransitions": 2, "acquireTime": "then"}
    spec = lease_spec("a", 10, 1.5, previous)
    assert (spec["acquireTime"], spec["leaseTransitions"]) == ("then", 2)
    assert spec["renewTime"] == "1970-01-01T00:00:01.500000Z"


def test_first_holder_starts_at_zero_transitions() -> None:
    assert lease_spec("a", 10, 0.0, None)["leaseTransitions"] == 0


class LeaseServer:
    """A stand-in for the API client's Lease calls; `hang` makes every call wait forever, as
    a hung API server does (the client's own timeouts are longer than a Lease)."""

    def __init__(self) -> None:
        self.raw: dict | None = None
        self.version = 0
        self.hang = False
        self.hanging = 0

    async def _maybe_hang(self) -> None:
        if self.hang:
            self.hanging += 1
            await asyncio.Event().wait()

    async def get(self, kind: object, namespace: str, name: str) -> dict | None:
        await self._maybe_hang()
        return self.raw

    async def create(self, kind: object, namespace: str, body: dict) -> dict:
        await self._maybe_hang()
        return self._stored(body)

    async def replace(self, kind: object, body: dict) -> dict:
        await self._maybe_hang()
        return self._stored(body)

    def _stored(self, body: dict) -> dict:
        self.version += 1
        self.raw = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return self.raw


async def test_a_holder_whose_api_server_hangs_steps_down_by_its_renew_deadline(caplog) -> None:
    caplog.set_level(logging.INFO, logger="mcp_oauth_gateway.kube")
    server = LeaseServer()
    changes: list[bool] = []
    election = LeaderElection(server, "ns", "replica-a", changes.append, duration=0.6)  # type: ignore[arg-type]
    task = asyncio.create_task(election.run())
    try:
        async with asyncio.timeout(10):  # a guard against a hang, not a timing assertion
            while not election.leader:
                await asyncio.sleep(0.01)
            server.hang = True
            while election.leader:
                await asyncio.sleep(0.01)
        # It stepped down while the API server's call was still hanging.
        assert server.hanging >= 1
        assert changes == [True, False]
        assert election.round_budget(0.0) == election.renew_deadline
        lines = [r.getMessage() for r in caplog.records]
        assert any("could not renew Lease ns/mcp-oauth-gateway" in line for line in lines)
        assert not any("replica-a holds Lease" in line for line in lines if "follower" in line)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_holders_round_may_last_only_until_its_renew_deadline() -> None:
    election = LeaderElection(LeaseServer(), "ns", "a", lambda _: None, duration=9.0)  # type: ignore[arg-type]
    election.leader, election.last_renewed = True, 100.0
    assert election.round_budget(101.0) == pytest.approx(5.0)  # 6 s deadline, 1 s gone
    assert election.round_budget(200.0) == 0.05


class CheckedLeaseServer(LeaseServer):
    """LeaseServer with the API server's optimistic concurrency: a replace naming a stale
    resourceVersion is refused with 409."""

    async def replace(self, kind: object, body: dict) -> dict:
        if self.raw and body["metadata"].get("resourceVersion") != str(self.version):
            raise ApiError(409, "Conflict", "the object has been modified", "update", "lease")
        return await super().replace(kind, body)


async def test_a_renewal_the_holder_never_saw_does_not_keep_it_from_giving_the_lease_up() -> None:
    server = CheckedLeaseServer()
    election = LeaderElection(server, "ns", "replica-a", lambda _: None, duration=9.0)  # type: ignore[arg-type]
    await election._round()
    assert election.leader
    # A renewal cut short by shutdown: the server stored it, the replica never read the answer.
    server._stored({**server.raw, "spec": {**server.raw["spec"], "renewTime": "later"}})  # type: ignore[dict-item]
    await election.release()
    assert server.raw is not None
    assert server.raw["spec"]["holderIdentity"] == ""


async def test_a_lease_taken_by_another_meanwhile_is_left_to_it() -> None:
    server = CheckedLeaseServer()
    election = LeaderElection(server, "ns", "replica-a", lambda _: None, duration=9.0)  # type: ignore[arg-type]
    await election._round()
    server._stored({**server.raw, "spec": {**server.raw["spec"], "holderIdentity": "replica-b"}})  # type: ignore[dict-item]
    await election.release()
    assert server.raw is not None
    assert server.raw["spec"]["holderIdentity"] == "replica-b"
