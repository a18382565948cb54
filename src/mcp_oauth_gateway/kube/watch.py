"""One list-and-watch loop per kind (or per kind and namespace), feeding the object cache (or
the Secrets of a namespace, kube/secrets.py).

A watch resumes from the last `resourceVersion` it saw (also across a lost connection or an API
server restart); only `410 Gone` (that version is compacted away) lists again. Failures are
retried with a short, jittered delay (a few seconds at most, so changes reach every replica soon
after the server answers again) and logged when they start, while they last, and when they end.

An error never counts as "the kind holds nothing": what was last listed stands until the server
answers. Only an optional kind never listed yet is taken as absent (none known) meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from ..controlplane.secret_sources import unreadable_advice
from .client import ApiError, KubeClient
from .kinds import Kind

log = logging.getLogger("mcp_oauth_gateway.kube")

FIRST_DELAY = 0.5
# Replicas retry within this (jittered, so they do not come back in step).
MAX_DELAY = 4.0
# While a kind keeps failing, one line about it this often.
FAILURE_LOG_INTERVAL = 30.0

# What a lost or refused connection raises (the API server restarting, the network).
CONNECTION_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError)


class Feed(Protocol):
    """Where a watch puts what it reads (the object cache, or one namespace's Secrets)."""

    def replace_all(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        """Install a fresh list."""

    def apply(self, kind: Kind, event_type: str, raw: dict[str, Any]) -> None:
        """Apply one watch event."""

    def refused(self, kind: Kind, advice: str, status: int) -> bool:
        """A refused list or watch; True when the kind is now taken as absent."""

    def failing(self, kind: Kind, why: str) -> None:
        """The API server could not be reached."""


def refusal_advice(kind: Kind, exc: ApiError, namespace: str | None = None) -> str:
    """What to do about a refused list or watch, for the log."""
    resource = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    if namespace is not None and exc.status in (401, 403):
        return unreadable_advice(namespace, exc.message or exc.reason or f"HTTP {exc.status}")
    if exc.status == 404:
        if not kind.group:
            return f"the API server does not serve core {kind.plural} ({kind.api_version})"
        if kind.group == "mcp-oauth-gateway.dev":
            return (
                f"the API server does not serve {resource}: install the CRDs "
                "(kubectl apply -k deploy/)"
            )
        return (
            f"the API server does not serve {resource} ({kind.api_version}): install the "
            "Gateway API CRDs (standard channel v1.x)"
        )
    if exc.status in (401, 403):
        return (
            f"the controller may not list/watch {resource} ({exc.message or exc.reason}): give "
            "its ServiceAccount the ClusterRole in deploy/ (kubectl apply -k deploy/)"
        )
    return str(exc)


@dataclass(slots=True)
class Backoff:
    """A delay that doubles while failures repeat and resets after a success."""

    delay: float = FIRST_DELAY
    failing_since: float | None = None
    last_log: float = 0.0

    def failed(self) -> float:
        """The delay before the next attempt: doubling up to MAX_DELAY, each a random half to
        whole of it."""
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since, self.delay = now, FIRST_DELAY
        else:
            self.delay = min(self.delay * 2, MAX_DELAY)
        return random.uniform(self.delay / 2, self.delay)

    def should_log(self) -> bool:
        """Log the first failure, then one line per interval."""
        now = time.monotonic()
        if self.last_log and now - self.last_log < FAILURE_LOG_INTERVAL:
            return False
        self.last_log = now
        return True

    def succeeded(self) -> float | None:
        """How long the failures lasted, when there were any."""
        if self.failing_since is None:
            return None
        lasted = time.monotonic() - self.failing_since
        self.failing_since, self.last_log, self.delay = None, 0.0, FIRST_DELAY
        return lasted


class KindWatch:
    """Keeps the feed's objects of one kind (in every namespace, or in one) current."""

    def __init__(self, client: KubeClient, feed: Feed, kind: Kind, namespace: str | None = None):
        self.client = client
        self.feed = feed
        self.kind = kind
        self.namespace = namespace
        self.label = kind.plural if namespace is None else f"{kind.plural} in {namespace}"
        self.resource_version: str | None = None
        self.backoff = Backoff()

    async def run(self) -> None:
        """List, then watch from where the list (or the last event) left off; forever."""
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
            except ApiError as exc:
                if exc.status == 410:
                    log.info("%s: the watch's version expired; listing again", self.label)
                    self.resource_version = None
                    continue
                await self._refused(exc)
            except CONNECTION_ERRORS as exc:
                await self._lost(exc)

    async def _list(self) -> None:
        listing = await self.client.list(self.kind, self.namespace)
        self.feed.replace_all(self.kind, listing.items, listing.resource_version)
        self.resource_version = listing.resource_version
        self._recovered()
        log.debug("%s: listed %d", self.label, len(listing.items))

    async def _watch(self) -> None:
        assert self.resource_version is not None
        # The watch being open is success (it may stay quiet): the next failure starts short.
        events = self.client.watch(
            self.kind, self.resource_version, opened=self._recovered, namespace=self.namespace
        )
        async for event in events:
            self._recovered()
            version = (event.object.get("metadata") or {}).get("resourceVersion")
            if event.type != "BOOKMARK":
                self.feed.apply(self.kind, event.type, event.object)
            if version:
                self.resource_version = str(version)

    def _recovered(self) -> None:
        lasted = self.backoff.succeeded()
        if lasted is not None:
            log.info("%s: reading the API server again after %.0fs", self.label, lasted)

    async def _refused(self, exc: ApiError) -> None:
        advice = refusal_advice(self.kind, exc, self.namespace)
        delay = self.backoff.failed()
        absent = self.kind.optional and exc.status in (403, 404)
        # What was listed stands, or the kind is taken as absent: the feed's call.
        gone = self.feed.refused(self.kind, advice, exc.status)
        if self.backoff.should_log():
            also = f"; {self.kind.when_absent}" if gone else ""
            level = logging.WARNING if absent else logging.ERROR
            log.log(level, "%s: %s%s; retrying in %.1fs", self.label, advice, also, delay)
        # A list starts again after a refusal: what is known stands until it succeeds.
        self.resource_version = None
        await asyncio.sleep(delay)

    async def _lost(self, exc: BaseException) -> None:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.feed.failing(self.kind, f"API server unreachable: {why}")
        delay = self.backoff.failed()
        if self.backoff.should_log():
            log.warning(
                "%s: lost the API server %s (%s); retrying in %.1fs, resuming from version %s",
                self.label,
                self.client.server,
                why,
                delay,
                self.resource_version or "(none: listing)",
            )
        await asyncio.sleep(delay)
