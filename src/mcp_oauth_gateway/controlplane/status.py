"""Policy status conditions (`Accepted`, `Attached`, `ResolvedRefs`) as DESIGN §3 defines them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str
    observed_generation: int
    last_transition_time: str

    def as_dict(self) -> dict[str, object]:
        """The Kubernetes-style representation (status as the strings True/False)."""
        return {
            "type": self.type,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.observed_generation,
            "lastTransitionTime": self.last_transition_time,
        }


def accepted(problems: list[str], generation: int, at: str) -> Condition:
    """`Accepted=True reason=Valid`, or `False reason=Invalid` naming every problem."""
    if problems:
        return Condition("Accepted", False, "Invalid", "; ".join(problems), generation, at)
    return Condition("Accepted", True, "Valid", "Policy accepted", generation, at)


def attached(
    valid: bool, missing: list[str], conflicts: list[str], generation: int, at: str
) -> Condition:
    """`Attached=True reason=Attached`, or why the policy is not attached."""
    if not valid:
        return Condition("Attached", False, "Pending",
                         "Policy is not attached due to invalid status", generation, at)
    if missing:
        return Condition("Attached", False, "TargetNotFound",
                         "Policy is not attached: " + "; ".join(missing), generation, at)
    if conflicts:
        return Condition("Attached", False, "Conflicted",
                         "Policy is not attached: " + "; ".join(conflicts), generation, at)
    return Condition("Attached", True, "Attached", "Attached to all targets", generation, at)


def resolved_refs(unavailable: list[str], generation: int, at: str,
                  stale: list[str] | None = None) -> Condition:
    """`ResolvedRefs=True`; `False reason=KeysetUnavailable` naming the URLs and errors; or,
    while refreshes fail but earlier keys still verify tokens, `True reason=KeysetStale`."""
    if unavailable:
        return Condition("ResolvedRefs", False, "KeysetUnavailable",
                         "; ".join(unavailable), generation, at)
    if stale:
        return Condition("ResolvedRefs", True, "KeysetStale", "; ".join(stale), generation, at)
    return Condition("ResolvedRefs", True, "ResolvedRefs", "Keyset fetched", generation, at)


def stale_message(url: str, error: str, failing_since: float, keys_fetched_at: float | None,
                  next_attempt_at: float | None, now: float) -> str:
    """What an operator needs about a keyset whose refresh fails: since when, why, which keys
    are still in use, and when the next try is."""
    fetched = f"the keys fetched at {iso(keys_fetched_at)}" if keys_fetched_at else \
        "the last keys fetched"
    upcoming = "" if next_attempt_at is None else \
        f"; next try at {iso(next_attempt_at)} (in {max(0.0, next_attempt_at - now):.0f}s)"
    return (f"keyset {url} is stale: refreshing it fails since {iso(failing_since)} ({error}); "
            f"still verifying tokens with {fetched}{upcoming}")


def iso(seconds: float) -> str:
    """A wall-clock time as RFC 3339 UTC, to the second."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
