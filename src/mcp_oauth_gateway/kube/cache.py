"""Every watched object as the API server last sent it, parsed once when it arrives.

Two versions tell readers what changed: `content_version` moves only when something the
builder reads changed (a spec, a label, an object added or removed), `version` on any change
(a status write included), so the controller's own status writes do not rebuild the snapshot
but do let the status writer see what it wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..controlplane.objects import RefusedGateway, RefusedPolicy
from ..resources.models import Resource
from .kinds import Kind
from .objects import Invalid, document_of, from_server, identity, refused_gateway, refused_policy

Json = dict[str, Any]
Name = tuple[str, str]  # (namespace, name); "" namespace for cluster-scoped kinds


def content(raw: Json) -> tuple[Any, ...]:
    """What the builder reads of an object (not its status or server bookkeeping)."""
    metadata = raw.get("metadata") or {}
    return (
        raw.get("apiVersion"),
        metadata.get("generation"),
        metadata.get("labels"),
        metadata.get("annotations"),
        raw.get("spec"),
    )


@dataclass(slots=True)
class Cached:
    """One object: as sent, and as the builder reads it (or why it cannot)."""

    raw: Json
    parsed: Resource | Invalid


@dataclass(slots=True)
class KindState:
    """The objects of one kind and how far the watch has got."""

    kind: Kind
    objects: dict[Name, Cached] = field(default_factory=dict)
    resource_version: str = ""
    # Listed at least once (or, for an optional kind, found not to be served).
    synced: bool = False
    # False for an optional kind the server does not serve or the controller may not read.
    available: bool = True
    last_error: str | None = None


def trimmed(raw: Json) -> Json:
    """`raw` without `metadata.managedFields`: often most of an object's size, read by nobody
    here, and left as it is by a status update that does not send it."""
    metadata = raw.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        raw = {**raw, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return raw


def _parsed(raw: Json, known: Cached | None) -> Cached:
    """The object as listed, the same model as before when the models read the same of it
    (a relist then rebuilds only what changed while the watch was away)."""
    if known is not None and document_of(known.raw) == document_of(raw):
        return Cached(raw, known.parsed)
    return Cached(raw, from_server(raw))


def _name(raw: Json) -> Name:
    _, namespace, name = identity(raw)
    return namespace, name


class ObjectCache:
    """The controller's view of the cluster, fed by one watch per kind."""

    def __init__(self, kinds: Iterable[Kind]):
        self.kinds = {kind.kind: KindState(kind) for kind in kinds}
        self.version = 0
        self.content_version = 0
        self.changed = asyncio.Event()

    def _bump(self, content_changed: bool) -> None:
        self.version += 1
        if content_changed:
            self.content_version += 1
        self.changed.set()

    def replace_all(self, kind: Kind, items: list[Json], resource_version: str) -> None:
        """Install a fresh list of `kind` (objects missing from it were deleted meanwhile)."""
        state = self.kinds[kind.kind]
        known = state.objects
        before = {name: content(cached.raw) for name, cached in known.items()}
        items = [trimmed(raw) for raw in items]
        state.objects = {_name(raw): _parsed(raw, known.get(_name(raw))) for raw in items}
        state.resource_version = resource_version
        first = not state.synced or not state.available
        state.synced, state.available, state.last_error = True, True, None
        after = {name: content(cached.raw) for name, cached in state.objects.items()}
        self._bump(first or before != after)

    def apply(self, kind: Kind, event_type: str, raw: Json) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED)."""
        state = self.kinds[kind.kind]
        raw = trimmed(raw)
        name = _name(raw)
        previous = state.objects.get(name)
        if event_type == "DELETED":
            if previous is None:
                return
            del state.objects[name]
            self._bump(True)
            return
        if previous is not None and previous.raw == raw:
            return
        unchanged = previous is not None and content(previous.raw) == content(raw)
        parsed = previous.parsed if previous is not None and unchanged else from_server(raw)
        state.objects[name] = Cached(raw, parsed)
        self._bump(not unchanged)

    def refused(self, kind: Kind, advice: str, status: int) -> bool:
        """A refused list or watch: an optional kind never listed is taken as absent (none
        known, so nothing it would permit is) rather than holding every other kind back; a
        kind once listed keeps what was listed (a server starting up answers 404 for a
        moment, and forgetting every ReferenceGrant would refuse what they permit). True when
        the kind is taken as absent."""
        state = self.kinds[kind.kind]
        absent = kind.optional and status in (403, 404)
        if absent and not state.synced:
            self.unavailable(kind, advice)
        else:
            state.last_error = advice
        return absent and not state.available

    def failing(self, kind: Kind, why: str) -> None:
        """The API server could not be reached; what was listed stands."""
        self.kinds[kind.kind].last_error = why

    def unavailable(self, kind: Kind, why: str) -> None:
        """An optional kind the server does not serve (or may not be read): none known."""
        state = self.kinds[kind.kind]
        changed = state.available or not state.synced or bool(state.objects)
        state.objects, state.synced, state.available, state.last_error = {}, True, False, why
        if changed:
            self._bump(True)

    @property
    def synced(self) -> bool:
        """Every kind listed at least once."""
        return all(state.synced for state in self.kinds.values())

    def waiting(self) -> list[str]:
        """The kinds not listed yet, with the last error each got."""
        return [
            f"{state.kind.plural}.{state.kind.group or 'core'}"
            + (f" ({state.last_error})" if state.last_error else " (not listed yet)")
            for state in self.kinds.values()
            if not state.synced
        ]

    def available(self, kind: Kind) -> bool:
        """Whether the objects of `kind` are known (listed and readable)."""
        state = self.kinds[kind.kind]
        return state.synced and state.available

    def raw(self, kind: Kind, namespace: str, name: str) -> Json | None:
        """An object as the server last sent it."""
        cached = self.kinds[kind.kind].objects.get((namespace, name))
        return cached.raw if cached is not None else None

    def resources(self) -> list[Resource | RefusedPolicy | RefusedGateway]:
        """Every object the builder can read, and a stand-in for each GatewayPolicy the models
        refuse (its routes fail closed rather than lose the policy) and each such Gateway (it
        keeps its ports)."""
        out: list[Resource | RefusedPolicy | RefusedGateway] = []
        for state in self.kinds.values():
            for cached in state.objects.values():
                if not isinstance(cached.parsed, Invalid):
                    out.append(cached.parsed)
                    continue
                stand_in = refused_policy(cached.raw, cached.parsed) or refused_gateway(
                    cached.raw, cached.parsed
                )
                if stand_in is not None:
                    out.append(stand_in)
        return out

    def invalid(self) -> list[tuple[Json, Invalid]]:
        """Every object the gateway cannot read, and why."""
        return [
            (cached.raw, cached.parsed)
            for state in self.kinds.values()
            for cached in state.objects.values()
            if isinstance(cached.parsed, Invalid)
        ]

    def all_raw(self, kind: Kind) -> list[Json]:
        """Every object of `kind` as sent."""
        return [cached.raw for cached in self.kinds[kind.kind].objects.values()]
