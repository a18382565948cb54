"""Watch the resource files while serving: a valid change swaps the snapshot atomically (requests
in flight keep the one they started with); an invalid change, or one that would widen access
(`protection.py`), keeps the running snapshot and logs why, problem by problem.

A change is read once it is complete as far as can be told: no file of it still open by its
writer (`writers.py`, where inotify works), unchanged for `SETTLE_SECONDS`, and unchanged while
it was read. Whatever a file read too early lacks, the reload rules refuse what it would open."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..resources.loader import FileCache, expand_paths, load_paths
from .build_cache import BuildCache
from .builder import build_snapshot
from .collector import collector_paused
from .control import ControlPlane
from .deployment import Deployment
from .protection import lost_protection
from .snapshot import Snapshot
from .writers import OpenWrites

log = logging.getLogger("mcp_oauth_gateway.reload")

Fingerprint = tuple[tuple[str, str, int, int], ...]
# How long a changed file must stay unchanged before it is read.
SETTLE_SECONDS = 0.1
MIN_POLL_GAP = 0.05


def fingerprint(paths: Sequence[str | Path]) -> Fingerprint:
    """Names, real paths, sizes and modification times of every resource file under `paths`.
    The real path is where a symlink leads: in a ConfigMap volume, into the directory `..data`
    names, so kubelet's swap of `..data` changes every file at once."""
    files, _ = expand_paths(paths)
    directories: dict[str, str] = {}  # directory → its real path
    out = []
    for path in files:
        name = str(path)
        try:
            stat = os.stat(name)
            linked = os.path.islink(name)
        except OSError:
            continue
        parent = os.path.dirname(name)
        if parent not in directories:
            directories[parent] = os.path.realpath(parent)
        # A file that is no link is where its directory really is (one lstat, not one a part).
        real = os.path.realpath(name) if linked else os.path.join(directories[parent], path.name)
        out.append((name, real, stat.st_mtime_ns, stat.st_size))
    return tuple(out)


@dataclass(frozen=True)
class ReloadCaches:
    """What a reload starts from: each file's resources by its content (only the documents that
    changed are parsed again) and what the last build computed (only what they reach is
    compiled again). The load that starts the gateway fills them, so the first reload costs
    what it changed too."""

    files: FileCache = field(default_factory=FileCache)
    builds: BuildCache = field(default_factory=BuildCache)


def load_into(
    paths: Sequence[str | Path], caches: ReloadCaches, deployment: Deployment | None = None
) -> Snapshot:
    """Load and build the files under `paths` through `caches` (the collector paused)."""
    with collector_paused():
        return build_snapshot(load_paths(paths, caches.files), deployment, caches.builds)


def reload_problems(current: Snapshot, candidate: Snapshot) -> list[str]:
    """Why `candidate` cannot replace `current` without a restart (empty when it can)."""
    problems = list(candidate.errors)
    for report in candidate.policies:
        for condition in report.conditions:
            if not condition.status:
                problems.append(
                    f"GatewayPolicy {report.key}: {condition.type}=False "
                    f"({condition.reason}): {condition.message}"
                )
    if set(candidate.listeners) != set(current.listeners):
        problems.append(
            f"listener ports changed ({sorted(current.listeners)} → "
            f"{sorted(candidate.listeners)}); restart the gateway to apply that"
        )
    return problems + lost_protection(current, candidate)


def open_routes(snapshot: Snapshot) -> set[str]:
    """The HTTPRoutes served without a GatewayPolicy (Gateway API: as they are)."""
    return {r.route for rows in snapshot.listeners.values() for r in rows if r.policy is None}


class ConfigWatcher:
    """Polls the files (cheap `stat` calls) and reloads on change."""

    def __init__(
        self,
        paths: Sequence[str],
        control: ControlPlane,
        interval: float = 1.0,
        deployment: Deployment | None = None,
        writers: OpenWrites | None = None,
        caches: ReloadCaches | None = None,
    ):
        self.paths = list(paths)
        self.deployment = deployment
        self.control = control
        self.interval = interval
        self.last_error: str | None = None
        # Polls so far, and the changed files still open by their writer (for `/status`).
        self.polls = 0
        self.waiting: tuple[str, ...] = ()
        self._seen = fingerprint(self.paths)
        self._writers = writers if writers is not None else OpenWrites()
        self._caches = caches or ReloadCaches()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        """Start polling (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="config-watch")

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            await asyncio.to_thread(self._writers.stop)

    def state(self) -> dict[str, object]:
        """What `/status` shows of the watch: polls, files waited for, how writes are seen."""
        return {
            "polls": self.polls,
            "waitingFor": list(self.waiting),
            "openWrites": "inotify" if self._writers.active else "unknown (polling only)",
        }

    async def _run(self) -> None:
        why = await asyncio.to_thread(self._writers.start, self.paths)
        if why is not None:
            log.warning(
                "%s: a changed file is read once unchanged for %.1f s, so a writer pausing "
                "longer mid-file may be read early (a reload still never widens access); "
                "write files elsewhere and rename them into place",
                why,
                SETTLE_SECONDS,
            )
        # A writer's close or rename wakes the next poll at once; the interval is for what
        # inotify cannot see (other systems, network filesystems, a writer that never closes).
        loop = asyncio.get_running_loop()

        def wake() -> None:
            loop.call_soon_threadsafe(self._wake.set)

        self._writers.on_done = wake
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()
            self._wake.clear()
            self.polls += 1
            await self._poll()
            # Bounds the polls a directory busy with other files' writes could wake.
            await asyncio.sleep(min(self.interval, MIN_POLL_GAP))

    async def _poll(self) -> None:
        current = await asyncio.to_thread(fingerprint, self.paths)
        if current == self._seen or self._written(current):
            return
        # A file caught while it is written (truncated, not yet filled) is read only once
        # it has stopped changing: until then the next poll looks again.
        await asyncio.sleep(min(self.interval, SETTLE_SECONDS))
        if await asyncio.to_thread(fingerprint, self.paths) != current or self._written(current):
            return
        self._seen = current
        await self.reload(current)

    def _written(self, current: Fingerprint) -> bool:
        """Whether a file of `current` is still open by the writer that changed it."""
        busy = self._writers.busy(entry[0] for entry in current)
        if busy and busy != self.waiting:
            log.info(
                "%s changed and is still open for writing; it is read once its writer closes it",
                ", ".join(busy),
            )
        self.waiting = busy
        return bool(busy)

    def _judged(self, current: Snapshot) -> tuple[Snapshot, list[str]]:
        """The files built, and why they cannot replace `current` (none: they can)."""
        candidate = load_into(self.paths, self._caches, self.deployment)
        with collector_paused():
            return candidate, reload_problems(current, candidate)

    async def reload(self, expected: Fingerprint | None = None) -> bool:
        """Load, validate and (if valid) install; True when the new snapshot is serving.
        With `expected`, a change while the files were read drops what was read: the next poll
        reads them again."""
        # Parsing, compiling and judging the change take milliseconds: off the event loop (only
        # this task installs snapshots, so the one judged against is still serving after).
        candidate, problems = await asyncio.to_thread(self._judged, self.control.snapshot)
        if expected is not None and await asyncio.to_thread(fingerprint, self.paths) != expected:
            log.info("the files changed while they were read; reading them again")
            self._seen = ()
            return False
        if problems:
            self.last_error = "; ".join(problems)
            log.error(
                "configuration change rejected, still serving the previous one: %s", self.last_error
            )
            return False
        opened = sorted(open_routes(candidate) - open_routes(self.control.snapshot))
        self.control.install(candidate)
        self.last_error = None
        for route in opened:
            # As at start: no request a policy decided is among them (refused above), but
            # whoever added the route may have meant to protect it.
            log.warning(
                "HTTPRoute %s is served without authentication: no GatewayPolicy targets it", route
            )
        log.info(
            "configuration reloaded: %d route(s) on %d listener(s), %d policy(ies)",
            sum(len(r) for r in candidate.listeners.values()),
            len(candidate.listeners),
            len(candidate.policies),
        )
        return True
