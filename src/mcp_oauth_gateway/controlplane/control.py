"""The control plane at run time: the current snapshot and the fetchers it needs.

Fetchers (JWKS, discovery) are keyed by URL and outlive snapshots, so installing a new
configuration keeps every keyset that is still referenced instead of fetching it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp

from ..urls import shown_url
from . import status
from .discovery import DiscoveryCache
from .egress import EgressRules
from .egress_resolver import guarded_session
from .fetch import FetchError
from .jwks import CLUSTER_JWKS_PATH, CLUSTER_JWKS_URL, InlineKeyset, RemoteKeyset
from .snapshot import KeysetSource, PolicyReport, Snapshot

Keyholder = RemoteKeyset | InlineKeyset


class ControlPlane:
    """Owns the snapshot; data-plane listeners are told when a new one is installed."""

    def __init__(self, snapshot: Snapshot, egress: EgressRules | None = None):
        self.snapshot = snapshot
        # In a cluster: where tenants' fetches (keys, discovery, token endpoints) may go.
        self.egress = egress
        self.keysets: dict[str, Keyholder] = {}
        self.discoveries: dict[str, DiscoveryCache] = {}
        self.session: aiohttp.ClientSession | None = None
        # Controller mode: reads a JSON document the API server serves (set once connected).
        self.cluster_documents: Callable[[str], Awaitable[object]] | None = None
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._stopping: set[asyncio.Future[None]] = set()
        self._sync()

    def subscribe(self, callback: Callable[[Snapshot], None]) -> None:
        """Call `callback` now and whenever a snapshot is installed."""
        self._subscribers.append(callback)
        callback(self.snapshot)

    async def start(self) -> None:
        """Open the fetch session and start every fetcher."""
        if self.session is None:
            self.session = guarded_session(self.egress)
        for holder in self.keysets.values():
            holder.start(self.session)
        for cache in self.discoveries.values():
            cache.start(self.session)

    async def stop(self) -> None:
        """Stop fetchers and close the session."""
        await asyncio.gather(
            *(h.stop() for h in self.keysets.values()),
            *(d.stop() for d in self.discoveries.values()),
        )
        if self.session is not None:
            await self.session.close()
            self.session = None

    def install(self, snapshot: Snapshot) -> None:
        """Swap in a new snapshot atomically and reconcile fetchers."""
        self.snapshot = snapshot
        stale = self._sync()
        for holder in stale:
            task = asyncio.ensure_future(holder.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
        for callback in self._subscribers:
            callback(snapshot)

    def _sync(self) -> list[Keyholder]:
        for url, source in self.snapshot.keysets.items():
            held = self.keysets.get(url)
            if held is not None and replaced_inline(held, source):
                # An inline keyset is kept under its policy's name: a reload that drops a key
                # (a revoked one) must not leave the old holder verifying with it. (Nothing
                # of an inline holder runs: it needs no stopping.)
                del self.keysets[url]
            if url not in self.keysets:
                holder: Keyholder
                if source.inline is not None:
                    holder = InlineKeyset(source.inline)
                elif url == CLUSTER_JWKS_URL:
                    holder = RemoteKeyset(url, source.refresh, fetch=self._cluster_jwks)
                else:
                    holder = RemoteKeyset(url, source.refresh)
                self.keysets[url] = holder
                if self.session is not None:
                    holder.start(self.session)
        for url in self.snapshot.discovery_urls:
            if url not in self.discoveries:
                self.discoveries[url] = DiscoveryCache(url, self.snapshot.discovery_urls[url])
                if self.session is not None:
                    self.discoveries[url].start(self.session)
        stale = [h for url, h in self.keysets.items() if url not in self.snapshot.keysets]
        for url in [u for u in self.keysets if u not in self.snapshot.keysets]:
            del self.keysets[url]
        for url in [u for u in self.discoveries if u not in self.snapshot.discovery_urls]:
            del self.discoveries[url]
        return stale

    async def _cluster_jwks(self) -> object:
        """The service-account issuer's keys, read from the API server the controller watches."""
        read = self.cluster_documents
        if read is None:
            raise FetchError("the API server is not connected (controller mode only)")
        try:
            return await read(CLUSTER_JWKS_PATH)
        except Exception as exc:
            # Its client's errors, whatever their type: the keyset's loop retries and reports.
            raise FetchError(f"GET {CLUSTER_JWKS_PATH} from the API server: {exc}") from exc

    def conditions(self, report: PolicyReport) -> list[status.Condition]:
        """The policy's conditions including the live `ResolvedRefs` keyset state."""
        conditions = list(report.conditions)
        if not report.keyset_urls or not report.ok:
            return conditions
        unavailable, stale = list(report.unresolved), []
        now = time.time()
        owners = report.keyset_owners or ("",) * len(report.keyset_urls)
        for url, owner in zip(report.keyset_urls, owners, strict=True):
            holder = self.keysets.get(url)
            if holder is None or not holder.available:
                why = holder.last_error if holder and holder.last_error else "not yet fetched"
                whose = f"{owner}: " if owner else ""
                unavailable.append(f"{whose}keyset {shown_url(url)} is not available: {why}")
            elif isinstance(holder, RemoteKeyset) and holder.failing_since is not None:
                stale.append(
                    status.stale_message(
                        url,
                        holder.last_error or "unknown error",
                        holder.failing_since,
                        holder.keys_fetched_at,
                        holder.next_attempt_at,
                        now,
                    )
                )
        conditions.append(
            status.resolved_refs(
                unavailable, report.generation, report.conditions[0].last_transition_time, stale
            )
        )
        return conditions


def replaced_inline(held: Keyholder, source: KeysetSource) -> bool:
    """Whether the holder of an inline keyset holds other keys than the snapshot gives (the
    policy's `jwks.inline` was edited): compiled keysets are compared by identity, so an
    unchanged policy keeps its holder and any recompiled one gets a new holder."""
    return source.inline is not None and (
        not isinstance(held, InlineKeyset) or held.keyset is not source.inline
    )
