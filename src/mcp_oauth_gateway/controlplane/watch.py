"""Watch the resource files while serving: a valid change swaps the snapshot atomically (requests
in flight keep the one they started with); an invalid change keeps the running snapshot and
logs why, problem by problem."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from ..resources.loader import FileCache, expand_paths, load_paths
from .builder import build_snapshot
from .collector import collector_paused
from .control import ControlPlane
from .deployment import Deployment
from .protection import lost_protection
from .snapshot import Snapshot

log = logging.getLogger("mcp_oauth_gateway.reload")

Fingerprint = tuple[tuple[str, int, int], ...]
# How long a changed file must stay unchanged before it is read.
SETTLE_SECONDS = 0.1


def fingerprint(paths: Sequence[str | Path]) -> Fingerprint:
    """Names, sizes and modification times of every resource file under `paths`."""
    files, _ = expand_paths(paths)
    out = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            continue
        out.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(out)


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


class ConfigWatcher:
    """Polls the files (cheap `stat` calls) and reloads on change."""

    def __init__(
        self,
        paths: Sequence[str],
        control: ControlPlane,
        interval: float = 1.0,
        deployment: Deployment | None = None,
    ):
        self.paths = list(paths)
        self.deployment = deployment
        self.control = control
        self.interval = interval
        self.last_error: str | None = None
        self._seen = fingerprint(self.paths)
        # Each file's resources by its content: a reload parses only the files that changed.
        self._files = FileCache()
        self._task: asyncio.Task[None] | None = None

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

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            current = await asyncio.to_thread(fingerprint, self.paths)
            if current == self._seen:
                continue
            # A file caught while it is written (truncated, not yet filled) is read only once
            # it has stopped changing: until then the next poll looks again.
            await asyncio.sleep(min(self.interval, SETTLE_SECONDS))
            if await asyncio.to_thread(fingerprint, self.paths) != current:
                continue
            self._seen = current
            await self.reload()

    def _build(self) -> Snapshot:
        with collector_paused():
            return build_snapshot(load_paths(self.paths, self._files), self.deployment)

    async def reload(self) -> bool:
        """Load, validate and (if valid) install; True when the new snapshot is serving."""
        # Parsing YAML and compiling CEL take milliseconds: off the event loop.
        candidate = await asyncio.to_thread(self._build)
        problems = reload_problems(self.control.snapshot, candidate)
        if problems:
            self.last_error = "; ".join(problems)
            log.error(
                "configuration change rejected, still serving the previous one: %s", self.last_error
            )
            return False
        self.control.install(candidate)
        self.last_error = None
        log.info(
            "configuration reloaded: %d route(s) on %d listener(s), %d policy(ies)",
            sum(len(r) for r in candidate.listeners.values()),
            len(candidate.listeners),
            len(candidate.policies),
        )
        return True
