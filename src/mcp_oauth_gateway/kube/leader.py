"""Leader election on a `coordination.k8s.io/v1` Lease: one replica writes status.

Every replica reads the Lease every `retry` seconds. The holder renews it; the others take it
over once it has not changed for its `leaseDurationSeconds` as measured by their own clock
(clocks of different machines are never compared). A holder that cannot renew within
`renew_deadline` stops writing before anyone may take over, and a holder that stops releases
the Lease so the next one takes over at once. Updates are conditional on `resourceVersion`, so
two replicas can never both win.

Why not `kubernetes_asyncio.leaderelection` (the client library we already use ships one)? Its
leader checks its renew deadline only between Lease calls, so one call that hangs keeps it
leading, and writing status, with no timer left that could stop it: client-go bounds each
renewal by the deadline, and so does `run` here. It also never gives the Lease up when
stopped (the next replica waits out the whole Lease), and refuses periods under a second
(the end-to-end tests run 3-second Leases, read every 0.6 s).
`tests/unit/kube/test_leader_library.py` shows each on the library itself;
`tests/unit/kube/test_leader.py` shows ours stepping down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .client import ApiError, KubeClient
from .kinds import LEASE
from .lease_defaults import DEFAULT_DURATION, DEFAULT_LEASE_NAME
from .watch import CONNECTION_ERRORS

log = logging.getLogger("mcp_oauth_gateway.kube")

Json = dict[str, Any]


def micro_time(at: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Observed:
    """A Lease as last read, and when (this process's monotonic clock) it last changed."""

    resource_version: str
    holder: str
    duration: float
    changed_at: float


def decide(observed: Observed | None, me: str, now: float) -> str:
    """`renew` (mine), `acquire` (free or expired) or `follow` (someone else's, live)."""
    if observed is None or not observed.holder:
        return "acquire"
    if observed.holder == me:
        return "renew"
    if now - observed.changed_at >= observed.duration:
        return "acquire"
    return "follow"


def lease_spec(me: str, duration: float, at: float, previous: Json | None) -> Json:
    """The spec to write when holding the Lease (`previous`: the spec read, if any)."""
    previous = previous or {}
    taking_over = previous.get("holderIdentity") != me
    transitions = int(previous.get("leaseTransitions") or 0)
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": micro_time(at) if taking_over else previous.get("acquireTime"),
        "renewTime": micro_time(at),
        "leaseTransitions": transitions + 1 if taking_over and previous else transitions,
    }


class LeaderElection:
    """Holds or follows one Lease; `on_change(True/False)` when this replica gains or loses it."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        identity: str,
        on_change: Callable[[bool], None],
        name: str = DEFAULT_LEASE_NAME,
        duration: float = DEFAULT_DURATION,
    ):
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.retry = max(0.2, duration / 5)
        self.renew_deadline = duration * 2 / 3
        self.on_change = on_change
        self.leader = False
        self.holder = ""
        self.last_renewed = 0.0
        self._observed: Observed | None = None
        self._raw: Json | None = None
        self._last_error: str | None = None

    @property
    def lease(self) -> str:
        """`namespace/name` of the Lease."""
        return f"{self.namespace}/{self.name}"

    async def run(self) -> None:
        """Try to hold the Lease, forever."""
        while True:
            budget = self.round_budget(time.monotonic())
            try:
                # As client-go does: a round may not outlast the renew deadline, whatever the
                # client's own timeouts (a hung API server kept a holder leading for ~31 s).
                async with asyncio.timeout(budget):
                    await self._round()
                self._last_error = None
            except TimeoutError:
                self._failed(TimeoutError(f"the API server did not answer within {budget:.1f}s"))
            except (ApiError, *CONNECTION_ERRORS) as exc:
                self._failed(exc)
            if self.leader and time.monotonic() - self.last_renewed > self.renew_deadline:
                log.warning(
                    "leader: could not renew Lease %s within %.1fs; no longer writing status",
                    self.lease,
                    self.renew_deadline,
                )
                self.holder = ""  # unknown: the Lease may expire or be taken
                self._set_leader(False)
            await asyncio.sleep(self.retry)

    def round_budget(self, now: float) -> float:
        """How long one round may take: a holder's, only until its renew deadline."""
        if self.leader:
            return max(0.05, self.last_renewed + self.renew_deadline - now)
        return self.renew_deadline

    def _failed(self, exc: BaseException) -> None:
        message = str(exc) or type(exc).__name__
        if message != self._last_error:
            advice = ""
            if isinstance(exc, ApiError) and exc.status in (401, 403):
                advice = " (give the ServiceAccount get/create/update on leases in this namespace)"
            elif isinstance(exc, ApiError) and exc.status == 404:
                advice = (
                    " (no such namespace: set --lease-namespace)"
                    if "namespaces" in exc.message
                    else " (the API server does not serve coordination.k8s.io/v1 leases)"
                )
            log.warning("leader election: Lease %s: %s%s", self.lease, message, advice)
        self._last_error = message

    def _observe(self, raw: Json | None, now: float) -> None:
        self._raw = raw
        if raw is None:
            self._observed = None
            return
        version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        spec = raw.get("spec") or {}
        previous = self._observed
        changed_at = (
            previous.changed_at if previous and previous.resource_version == version else now
        )
        self._observed = Observed(
            version,
            str(spec.get("holderIdentity") or ""),
            float(spec.get("leaseDurationSeconds") or self.duration),
            changed_at,
        )

    async def _round(self) -> None:
        now = time.monotonic()
        self._observe(await self.client.get(LEASE, self.namespace, self.name), now)
        action = decide(self._observed, self.identity, now)
        observed = self._observed
        if action == "follow":
            assert observed is not None
            self.holder = observed.holder
            self._set_leader(False)
            return
        try:
            await self._write(self._raw)
        except ApiError as exc:
            if exc.status != 409:
                raise
            # Another replica wrote first: it holds the Lease now.
            self._set_leader(False)
            return
        self.last_renewed = now
        self.holder = self.identity
        self._set_leader(True)

    async def _write(self, raw: Json | None) -> None:
        spec = lease_spec(
            self.identity, self.duration, time.time(), raw.get("spec") if raw else None
        )
        if raw is None:
            body = {
                "apiVersion": LEASE.api_version,
                "kind": LEASE.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            self._raw = await self.client.create(LEASE, self.namespace, body)
        else:
            self._raw = await self.client.replace(LEASE, {**raw, "spec": spec})
        self._observe(self._raw, time.monotonic())

    def _set_leader(self, leader: bool) -> None:
        if leader == self.leader:
            return
        self.leader = leader
        if leader:
            log.info("leader: %s holds Lease %s and writes status", self.identity, self.lease)
        elif self.holder and self.holder != self.identity:
            log.info(
                "follower: %s serves traffic; %s holds Lease %s and writes status",
                self.identity,
                self.holder,
                self.lease,
            )
        else:
            log.info(
                "follower: %s serves traffic and writes no status; no replica is known to hold "
                "Lease %s",
                self.identity,
                self.lease,
            )
        self.on_change(leader)

    async def release(self) -> None:
        """Give the Lease up (on shutdown), so another replica takes over at once."""
        if not self.leader or self._raw is None:
            return
        # Stop writing first; nobody else is told to lead (the others take it over).
        self.leader, self.holder = False, ""
        self.on_change(False)
        try:
            async with asyncio.timeout(5):
                released = await self._give_up(self._raw)
            if released:
                log.info("released Lease %s: another replica takes over status", self.lease)
        except (ApiError, *CONNECTION_ERRORS, TimeoutError) as exc:
            log.warning("could not release Lease %s (%s); it expires by itself", self.lease, exc)

    async def _give_up(self, raw: Json) -> bool:
        """Write the Lease free; False if it names another holder by now."""
        for attempt in (1, 2):
            spec = {**(raw.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1}
            try:
                await self.client.replace(LEASE, {**raw, "spec": spec})
                return True
            except ApiError as exc:
                if exc.status != 409 or attempt == 2:
                    raise
            # A renewal cut short by the shutdown may have landed after all: read the Lease
            # again and give it up only while it still names this replica.
            fresh = await self.client.get(LEASE, self.namespace, self.name)
            if fresh is None or (fresh.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            raw = fresh
        return False
