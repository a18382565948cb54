"""The Secrets the policies may use, and only those: one list-and-watch per namespace that some
policy's `secretRef` points into (its own, or one whose ReferenceGrant permits it), opened and
closed as those references come and go.

A namespace's watch receives all of its Secrets (RBAC and the API cannot narrow a watch to a
set of names); each is dropped as it arrives unless a policy names it, so only those are kept,
decoded, and a name newly referenced lists the namespace again. A Secret changed, deleted or
given a new key changes what the builder is given, which rebuilds as any watched change does.
A refusal (the controller may not read that namespace's Secrets) forgets what was read there
and tells the policies what to grant.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from ..controlplane.cluster_secrets import ClusterSecrets
from ..controlplane.objects import Entry, RefusedGateway, RefusedPolicy
from ..controlplane.secret_sources import wanted_secrets
from ..resources.models import GatewayPolicy, ReferenceGrant, Resource
from .client import KubeClient
from .kinds import SECRET, Kind
from .watch import KindWatch

log = logging.getLogger("mcp_oauth_gateway.kube")

Json = dict[str, Any]


def decoded(raw: Json) -> dict[str, bytes]:
    """A Secret's `data`, decoded (a value that is not base64, which no API server sends, is
    left out: the policy then names the key as missing)."""
    out: dict[str, bytes] = {}
    data = raw.get("data")
    for key, value in (data if isinstance(data, dict) else {}).items():
        if isinstance(key, str) and isinstance(value, str):
            with contextlib.suppress(binascii.Error, ValueError):
                out[key] = base64.b64decode(value, validate=True)
    return out


def _name(raw: Json) -> str:
    metadata = raw.get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, dict) else ""


def wanted_from(
    resources: Iterable[Resource | RefusedPolicy | RefusedGateway],
) -> dict[str, frozenset[str]]:
    """Namespace → the Secrets some policy of the cache may use (controlplane's rule)."""
    items = list(resources)
    policies = [r for r in items if isinstance(r, GatewayPolicy)]
    grants = {r.metadata.key: Entry(r) for r in items if isinstance(r, ReferenceGrant)}
    return wanted_secrets(policies, grants)


class NamespaceSecrets:
    """The named Secrets of one namespace, as its watch last saw them (the watch's feed)."""

    def __init__(self, namespace: str, names: frozenset[str], changed: asyncio.Event):
        self.namespace = namespace
        self.names = names
        self._changed = changed
        self.version = 0
        self.data: dict[str, dict[str, bytes]] = {}
        self.synced = False
        self.unreadable: str | None = None
        self.last_error: str | None = None

    def __repr__(self) -> str:
        return f"NamespaceSecrets({self.namespace!r}, {sorted(self.data)})"

    def _bump(self) -> None:
        self.version += 1
        self._changed.set()

    def replace_all(self, kind: Kind, items: list[Json], resource_version: str) -> None:
        """Keep, of a fresh list, the Secrets a policy names."""
        data = {_name(raw): decoded(raw) for raw in items if _name(raw) in self.names}
        first = not self.synced or self.unreadable is not None
        self.synced, self.unreadable, self.last_error = True, None, None
        if first or data != self.data:
            self.data = data
            self._bump()

    def apply(self, kind: Kind, event_type: str, raw: Json) -> None:
        """One watch event; a Secret no policy names is dropped unread."""
        name = _name(raw)
        if name not in self.names:
            return
        if event_type == "DELETED":
            if self.data.pop(name, None) is not None:
                self._bump()
            return
        value = decoded(raw)
        if self.data.get(name) != value:
            self.data[name] = value
            self._bump()

    def refused(self, kind: Kind, advice: str, status: int) -> bool:
        """Not allowed to read (401/403), or not served (404): what was read is forgotten (the
        grant to read it was withdrawn), and the policies say what to do. Anything else is
        retried, keeping what was read."""
        if status not in (401, 403, 404):
            self.last_error = advice
            return False
        changed = not self.synced or self.unreadable != advice or bool(self.data)
        self.data, self.synced, self.unreadable, self.last_error = {}, True, advice, advice
        if changed:
            self._bump()
        return True

    def failing(self, kind: Kind, why: str) -> None:
        """The API server could not be reached; what was read stands."""
        self.last_error = why

    def broken(self, why: str) -> None:
        """The watch ended on a bug: fail the policies closed rather than wait for it."""
        self.data, self.synced, self.unreadable, self.last_error = {}, True, why, why
        self._bump()

    def keep(self, names: frozenset[str]) -> None:
        """Forget the Secrets no policy names any more."""
        self.names = names
        dropped = set(self.data) - names
        for name in dropped:
            del self.data[name]
        if dropped:
            self._bump()


def _ended(feed: NamespaceSecrets, task: asyncio.Task[None]) -> None:
    """A watch ends only when cancelled; one that died of a bug fails its policies closed
    (never holding every other rebuild back), until the Secrets named there change."""
    if task.cancelled() or task.exception() is None:
        return
    # The type only: a message could quote what was being read.
    why = f"reading the Secrets of {feed.namespace} failed ({type(task.exception()).__name__})"
    log.error("secrets in %s: %s; the policies that name them fail closed", feed.namespace, why)
    feed.broken(why)


class SecretWatches:
    """One watch per namespace whose Secrets some policy may use; their view for the builder."""

    def __init__(self, client: KubeClient, changed: asyncio.Event):
        self.client = client
        self._changed = changed
        self._closed = 0
        self.namespaces: dict[str, NamespaceSecrets] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def version(self) -> tuple[int, ...]:
        """Moves whenever what the builder is given changes."""
        return (self._closed, *(self.namespaces[n].version for n in sorted(self.namespaces)))

    def want(self, wanted: Mapping[str, frozenset[str]]) -> None:
        """Watch exactly the namespaces named, keeping exactly the Secrets named there."""
        for namespace in [n for n in self.namespaces if n not in wanted]:
            self._close(namespace)
        for namespace, names in wanted.items():
            current = self.namespaces.get(namespace)
            if current is not None and names <= current.names:
                current.keep(names)
                continue
            # A name not kept so far: list the namespace again to read it.
            self._close(namespace)
            self._open(namespace, names)

    def _open(self, namespace: str, names: frozenset[str]) -> None:
        feed = NamespaceSecrets(namespace, names, self._changed)
        watch = KindWatch(self.client, feed, SECRET, namespace)
        self.namespaces[namespace] = feed
        task = asyncio.create_task(watch.run(), name=f"watch-secrets-{namespace}")
        task.add_done_callback(lambda done: _ended(feed, done))
        self._tasks[namespace] = task

    def _close(self, namespace: str) -> None:
        task = self._tasks.pop(namespace, None)
        if task is not None:
            task.cancel()
        if self.namespaces.pop(namespace, None) is not None:
            self._closed += 1
            self._changed.set()

    @property
    def synced(self) -> bool:
        """Every watched namespace listed (or found unreadable) at least once."""
        return all(feed.synced for feed in self.namespaces.values())

    def waiting(self) -> list[str]:
        """The namespaces not listed yet, with the last error each got."""
        return [
            f"secrets in {name} ({feed.last_error or 'not listed yet'})"
            for name, feed in sorted(self.namespaces.items())
            if not feed.synced
        ]

    def view(self) -> ClusterSecrets:
        """What the builder reads: the kept Secrets, by (namespace, name)."""
        data = {
            (namespace, name): MappingProxyType(dict(values))
            for namespace, feed in self.namespaces.items()
            for name, values in feed.data.items()
        }
        unreadable = {
            n: feed.unreadable for n, feed in self.namespaces.items() if feed.unreadable is not None
        }
        listed = frozenset(n for n, feed in self.namespaces.items() if feed.synced)
        return ClusterSecrets(MappingProxyType(data), listed, MappingProxyType(unreadable))

    def state(self) -> dict[str, Any]:
        """Per namespace watched: the Secrets kept (names only) or why none can be read."""
        return {
            namespace: {
                "secrets": sorted(feed.data),
                "error": feed.unreadable or feed.last_error,
            }
            for namespace, feed in sorted(self.namespaces.items())
        }

    async def stop(self) -> None:
        """Stop every watch."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
