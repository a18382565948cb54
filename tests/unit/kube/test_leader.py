"""Leader election decisions: renew what is mine, take what is free or expired (by the local
clock since it last changed), follow a live holder."""

from __future__ import annotations

from mcp_oauth_gateway.kube.leader import Observed, decide, lease_spec


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
