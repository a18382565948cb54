"""The controller: watch the cluster, rebuild the snapshot when what it reads changes, and
(as the Lease holder) write every object's status.

A burst of changes (`kubectl apply -f` of a directory, a relist) settles before one rebuild,
so it swaps the snapshot once. The snapshot is built by the same pure function as in file mode;
unlike file mode, an invalid object does not keep the previous configuration: the cluster is the
truth, and the object's route fails closed while its status says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ..controller_name import CONTROLLER_NAME
from ..controlplane.build_cache import BuildCache
from ..controlplane.builder import BuildResult, build_from_objects
from ..controlplane.cluster import Cluster
from ..controlplane.control import ControlPlane
from ..controlplane.deployment import Deployment
from ..controlplane.egress import EgressRules
from .cache import ObjectCache
from .client import KubeClient
from .kinds import SERVICE, WATCHED
from .leader import LeaderElection
from .lease_defaults import DEFAULT_DURATION, DEFAULT_LEASE_NAME
from .secrets import SecretWatches, wanted_from
from .watch import KindWatch
from .writer import StatusWriter, updates

log = logging.getLogger("mcp_oauth_gateway.kube")

# A change is built once no other arrived for QUIET seconds, or SETTLE_AT_MOST after the first.
QUIET = 0.1
SETTLE_AT_MOST = 1.0
# Status is compared with what it should be at least this often (keysets come and go).
STATUS_RESYNC = 5.0
# While the first list is incomplete, one progress line this often.
PROGRESS_INTERVAL = 10.0


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    """`serve --kubeconfig`'s settings."""

    kubeconfig: str | None  # None: in-cluster configuration
    identity: str
    lease_namespace: str
    controller_name: str = CONTROLLER_NAME
    cluster_domain: str = "cluster.local"
    lease_name: str = DEFAULT_LEASE_NAME
    lease_duration: float = DEFAULT_DURATION
    egress: EgressRules = field(default_factory=EgressRules)


def now_iso() -> str:
    """The time stamped on conditions."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary(result: BuildResult) -> str:
    """One line about a snapshot, for the log."""
    snapshot = result.snapshot
    routes = sum(len(r) for r in snapshot.listeners.values())
    ports = ", ".join(str(p) for p in sorted(snapshot.listeners)) or "none"
    return f"{routes} route(s) on port(s) {ports}, {len(snapshot.policies)} policy(ies)"


def problems(result: BuildResult) -> set[str]:
    """What is wrong in a snapshot, one line each (logged when it first appears)."""
    lines = set(result.snapshot.errors)
    for report in result.snapshot.policies:
        for condition in report.conditions:
            if not condition.status:
                lines.add(
                    f"GatewayPolicy {report.key}: {condition.type}=False ({condition.reason}): "
                    f"{condition.message}"
                )
    return lines


class Controller:
    """Owns the watches, the Lease and the status writer of one replica."""

    def __init__(
        self,
        client: KubeClient,
        control: ControlPlane,
        options: ControllerOptions,
        deployment: Deployment,
        unbound: Callable[[], Mapping[int, str]] = dict,
    ):
        self.client = client
        self.control = control
        self.options = options
        self.deployment = deployment
        self.unbound = unbound
        self.cache = ObjectCache(WATCHED)
        self.secrets = SecretWatches(client, self.cache.changed)
        self.election = LeaderElection(
            client,
            options.lease_namespace,
            options.identity,
            self._leadership,
            options.lease_name,
            options.lease_duration,
        )
        self.writer = StatusWriter(client)
        self.result: BuildResult | None = None
        # What the last build computed: a rebuild compiles only what the changed objects reach.
        self.builds = BuildCache()
        self.swaps = 0
        self._built_version: tuple[int, tuple[int, ...]] | None = None
        self._problems: set[str] = set()
        self._invalid: set[tuple[str, str, str, int]] = set()
        self._status_due = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start the watches, the election, the rebuilds and the status writes."""
        for kind in WATCHED:
            watch = KindWatch(self.client, self.cache, kind)
            self._tasks.append(asyncio.create_task(watch.run(), name=f"watch-{kind.plural}"))
        for name, job in (
            ("lease", self.election.run),
            ("rebuild", self._rebuilds),
            ("status", self._status_writes),
            ("progress", self._progress),
        ):
            self._tasks.append(asyncio.create_task(job(), name=f"controller-{name}"))

    async def stop(self) -> None:
        """Give up the Lease, stop every task, close the client."""
        # The election's own rounds end first: a renewal in flight would race the release (a
        # 409 that leaves the Lease held until it expires), and a round after it would take
        # the Lease back.
        rounds = [task for task in self._tasks if task.get_name() == "controller-lease"]
        for task in rounds:
            task.cancel()
        await asyncio.gather(*rounds, return_exceptions=True)
        await self.election.release()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.secrets.stop()
        await self.client.close()

    # --- what the admin listener shows ---------------------------------------------------------

    def waiting(self) -> list[str]:
        """Why this replica is not ready yet (empty when it serves the cluster's configuration)."""
        if self.result is not None:
            return []
        return [
            "the first list of every kind from the API server: "
            + "; ".join(
                self.cache.waiting() + self.secrets.waiting() or ["building the configuration"]
            )
        ]

    def state(self) -> dict[str, Any]:
        """The controller's state for `/status`."""
        return {
            "apiServer": self.client.server,
            "identity": self.options.identity,
            "leader": self.election.leader,
            "lease": {"name": self.election.lease, "holder": self.election.holder or None},
            "synced": self.cache.synced,
            "snapshotSwaps": self.swaps,
            "statusWrites": self.writer.written,
            "statusFailures": dict(self.writer.failed),
            # What this replica has asked the API server for, as RBAC names it.
            "apiCalls": [
                {"verb": c.verb, "apiGroup": c.group, "resource": c.resource}
                for c in sorted(self.client.calls, key=lambda c: (c.group, c.resource, c.verb))
            ],
            # Names only: which Secrets are kept, per namespace, or why none can be read.
            "secretNamespaces": self.secrets.state(),
            "invalidObjects": [
                f"{i.kind} {i.namespace}/{i.name}: " + "; ".join(i.problems)
                for _, i in self.cache.invalid()
            ],
        }

    # --- rebuilding ------------------------------------------------------------------------------

    async def _settle(self) -> None:
        """Wait until changes stop arriving (or for at most SETTLE_AT_MOST)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_AT_MOST
        quiet_until = loop.time() + QUIET
        seen = self._version()
        while True:
            self.cache.changed.clear()
            remaining = min(quiet_until, deadline) - loop.time()
            if remaining <= 0:
                return
            try:
                async with asyncio.timeout(remaining):
                    await self.cache.changed.wait()
            except TimeoutError:
                return
            # Only what the builder reads restarts the quiet time: the events of this
            # replica's own status writes (hundreds after a start) held every change a second.
            if self._version() != seen:
                seen = self._version()
                quiet_until = loop.time() + QUIET

    async def _rebuilds(self) -> None:
        while True:
            await self.cache.changed.wait()
            await self._settle()
            if not self.cache.synced:
                continue
            # The Secrets the policies may use now; a namespace newly watched is waited for.
            self.secrets.want(wanted_from(self.cache.resources()))
            if not self.secrets.synced:
                continue
            if self._version() != self._built_version or self.result is None:
                try:
                    await self.rebuild()
                except Exception:
                    # A bug must not stop the controller: it keeps serving the last good
                    # configuration and says so, and the next change is built again.
                    self._built_version = self._version()
                    log.exception(
                        "building the configuration from the API server failed; the last "
                        "good configuration is still served"
                    )
                    continue
            self._status_due.set()

    def _version(self) -> tuple[int, tuple[int, ...]]:
        """What the builder reads moved when this did."""
        return self.cache.content_version, self.secrets.version

    async def rebuild(self) -> None:
        """Build from the cache and install the snapshot."""
        version = self._version()
        cluster = replace(
            self.deployment.cluster or Cluster(),
            controller_name=self.options.controller_name,
            cluster_domain=self.options.cluster_domain,
            services_listed=self.cache.available(SERVICE),
            egress=self.options.egress,
            secrets=self.secrets.view(),
        )
        deployment = replace(self.deployment, cluster=cluster)
        resources = self.cache.resources()
        result = await asyncio.to_thread(
            lambda: build_from_objects(
                resources, at=now_iso(), deployment=deployment, cache=self.builds
            )
        )
        self.control.install(result.snapshot)
        first = self.result is None
        self.result, self._built_version = result, version
        self.swaps += 1
        log.info(
            "%s configuration from the API server: %s",
            "serving the" if first else "applied a new",
            summary(result),
        )
        self._log_problems(result)

    def _log_problems(self, result: BuildResult) -> None:
        current = problems(result)
        for line in sorted(current - self._problems):
            log.warning("%s", line)
        self._problems = current
        invalid = {(i.kind, i.namespace, i.name, i.generation): i for _, i in self.cache.invalid()}
        for key in sorted(set(invalid) - self._invalid):
            item = invalid[key]
            log.error(
                "%s %s/%s is not served: %s",
                item.kind,
                item.namespace,
                item.name,
                "; ".join(item.problems),
            )
        self._invalid = set(invalid)

    # --- status ----------------------------------------------------------------------------------

    def _leadership(self, leader: bool) -> None:
        if leader:
            self._status_due.set()

    async def _status_writes(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STATUS_RESYNC):
                    await self._status_due.wait()
            self._status_due.clear()
            if self.election.leader and self.result is not None:
                await self.write_status(self.result)

    async def write_status(self, result: BuildResult) -> int:
        """Write every status that differs from what it should be; how many were written."""
        pending = updates(
            result,
            self.cache,
            self.control.conditions,
            self.options.controller_name,
            now_iso(),
            self.unbound(),
        )
        if not pending:
            return 0
        written = await self.writer.write(pending, lambda: self.election.leader)
        if written:
            log.info("wrote the status of %d object(s)", written)
        return written

    async def _progress(self) -> None:
        while self.result is None:
            await asyncio.sleep(PROGRESS_INTERVAL)
            if self.result is None:
                log.info("still waiting for %s", "; ".join(self.waiting()))
