"""What a federated route rule last saw of each target: up or down, the last failure (its text,
which names no address and carries nothing of the client's), when, and its failures counted by
reason. Kept with the rule's sessions (FederationState), so it outlives configuration reloads,
and shown on the admin listener's `/status` and in its metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .target import Unavailable


@dataclass
class TargetHealth:
    """One target, as last seen by this route rule."""

    # True: its last exchange went through; False: it failed; None: not asked yet.
    up: bool | None = None
    last_error: str | None = None
    # Wall-clock times (seconds since the epoch) of the last failure and the last success.
    last_error_at: float | None = None
    last_ok_at: float | None = None
    # Reason (timeout, unreachable, http_error, bad_answer, refused, session_lost,
    # no_credential) → count.
    failures: dict[str, int] = field(default_factory=dict)

    def view(self) -> dict[str, object]:
        """This target's health as `/status` shows it."""
        return {
            "up": self.up,
            "lastError": self.last_error,
            "lastErrorAt": _shown_time(self.last_error_at),
            "lastOkAt": _shown_time(self.last_ok_at),
            "failures": dict(sorted(self.failures.items())),
        }


class Health:
    """A route rule's targets' health, by target name."""

    def __init__(self) -> None:
        self.targets: dict[str, TargetHealth] = {}

    def of(self, name: str) -> TargetHealth:
        """The target's health (not asked yet, for a target never seen)."""
        return self.targets.setdefault(name, TargetHealth())

    def ok(self, name: str) -> None:
        """The target answered."""
        health = self.of(name)
        health.up = True
        health.last_ok_at = time.time()

    def failed(self, name: str, failure: Unavailable) -> None:
        """An exchange with the target failed: counted by reason; down when it did not answer
        (a target that answered, even with a refusal or a lost session, is up)."""
        if failure.reason is None:
            self.ok(name)
            return
        health = self.of(name)
        if failure.down is not None:  # None: the target was not asked (no credential for it)
            health.up = not failure.down
        health.last_error = str(failure)
        health.last_error_at = time.time()
        health.failures[failure.reason] = health.failures.get(failure.reason, 0) + 1


def _shown_time(at: float | None) -> str | None:
    if at is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
