"""What a federated route rule last saw of each target: up or down, the last failure (its text,
which names no address and carries nothing of the client's), when, and its failures counted by
reason. Kept with the rule's sessions (FederationState), so it outlives configuration reloads,
and shown on the admin listener's `/status` and in its metrics.

With a Redis shared by several replicas (`share`: `shared_health`), each replica sends what it
saw there in the background, and `/status` shows what all of them saw, merged (read when
`/status` is asked: `refresh`), the same at every replica; the metrics stay this replica's own
(counters of every replica add up in the metrics' own sums)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .target import Unavailable

log = logging.getLogger("mcp_oauth_gateway.federation")


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


def _later(a: float | None, b: float | None) -> float | None:
    return b if a is None or (b is not None and b > a) else a


@dataclass
class Seen:
    """What was seen of a target, as replicas add it up: the last time it was seen answering
    (`ok_at`), up (it answered, if only a refusal), down; its last failure (when, what), and
    failures by reason."""

    ok_at: float | None = None
    up_at: float | None = None
    down_at: float | None = None
    error: tuple[float, str] | None = None
    failures: dict[str, int] = field(default_factory=dict)

    def add(self, other: Seen) -> None:
        """Take in `other` (later times win, counts add up)."""
        self.ok_at = _later(self.ok_at, other.ok_at)
        self.up_at = _later(self.up_at, other.up_at)
        self.down_at = _later(self.down_at, other.down_at)
        if other.error is not None and (self.error is None or other.error[0] > self.error[0]):
            self.error = other.error
        for reason, count in other.failures.items():
            self.failures[reason] = self.failures.get(reason, 0) + count

    def health(self) -> TargetHealth:
        """The target's health as this tells it."""
        up = None
        if self.up_at is not None or self.down_at is not None:
            up = (self.up_at or 0.0) >= (self.down_at or 0.0)
        return TargetHealth(
            up=up,
            last_error=self.error[1] if self.error is not None else None,
            last_error_at=self.error[0] if self.error is not None else None,
            last_ok_at=self.ok_at,
            failures=dict(self.failures),
        )


class HealthStore(Protocol):
    """Where replicas add up what they saw of the targets (their Redis)."""

    async def add_health(self, seen: Mapping[str, Seen]) -> None:
        """Add what this replica saw since its last report."""
        ...

    async def read_health(self, targets: Iterable[str]) -> dict[str, Seen] | None:
        """What every replica saw of `targets` (None: it could not be read)."""
        ...


class Health:
    """A route rule's targets' health, by target name."""

    def __init__(self) -> None:
        self.targets: dict[str, TargetHealth] = {}
        # Shared: where, what is still to be reported, what all replicas saw when last read.
        self.store: HealthStore | None = None
        self._pending: dict[str, Seen] = {}
        self._reporting: asyncio.Task[None] | None = None
        self._merged: dict[str, TargetHealth] = {}

    def share(self, store: HealthStore) -> None:
        """Add what this replica sees to what the others see, through `store`."""
        self.store = store

    def shown(self, name: str) -> TargetHealth:
        """The target's health as `/status` shows it: every replica's when shared and read."""
        merged = self._merged.get(name) if self.store is not None else None
        return merged if merged is not None else self.of(name)

    def _note(self, name: str, seen: Seen) -> None:
        if self.store is None:
            return
        self._pending.setdefault(name, Seen()).add(seen)
        if self._reporting is None or self._reporting.done():
            # No loop (a test's direct call): reported on the next refresh.
            with contextlib.suppress(RuntimeError):
                self._reporting = asyncio.get_running_loop().create_task(self.report())

    async def report(self) -> None:
        """Send what this replica saw since its last report."""
        while self.store is not None and self._pending:
            pending, self._pending = self._pending, {}
            await self.store.add_health(pending)

    async def refresh(self, names: Iterable[str]) -> None:
        """Report, then read what every replica saw of `names` (kept when it cannot be read)."""
        if self.store is None:
            return
        if self._reporting is not None and not self._reporting.done():
            # What this replica saw last is on its way: read it back too. (Shielded: a client
            # leaving `/status` does not cancel the report.)
            await asyncio.shield(self._reporting)
        await self.report()
        seen = await self.store.read_health(names)
        if seen is not None:
            self._merged = {name: found.health() for name, found in seen.items()}

    def of(self, name: str) -> TargetHealth:
        """The target's health (not asked yet, for a target never seen)."""
        return self.targets.setdefault(name, TargetHealth())

    def ok(self, name: str) -> None:
        """The target answered."""
        health = self.of(name)
        health.up = True
        health.last_ok_at = now = time.time()
        self._note(name, Seen(ok_at=now, up_at=now))

    def failed(self, name: str, failure: Unavailable) -> None:
        """An exchange with the target failed: counted by reason; down when it did not answer
        (a target that answered, even with a refusal or a lost session, is up)."""
        if failure.reason is None:
            self.ok(name)
            return
        health = self.of(name)
        now = time.time()
        seen = Seen(error=(now, str(failure)), failures={failure.reason: 1})
        if failure.down is not None:  # None: the target was not asked (no credential for it)
            health.up = not failure.down
            if failure.down:
                seen.down_at = now
            else:
                seen.up_at = now
        health.last_error = str(failure)
        health.last_error_at = now
        health.failures[failure.reason] = health.failures.get(failure.reason, 0) + 1
        self._note(name, seen)


def _shown_time(at: float | None) -> str | None:
    if at is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
