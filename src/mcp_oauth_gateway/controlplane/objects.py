"""The builder's input: resource objects, indexed by kind and `namespace/name`.

Objects come from files (each a `Loaded`, whose source prefixes every message about it) or, in
Kubernetes mode, from the API server (bare models, without a source). Indexing sorts them, so no
later step can depend on the order they arrived in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar

from ..resources.loader import Loaded
from ..resources.models import (
    Gateway,
    GatewayBackend,
    GatewayClass,
    GatewayClassParameters,
    GatewayPolicy,
    HTTPRoute,
    ReferenceGrant,
    Resource,
    Service,
)


@dataclass(frozen=True, slots=True)
class RefusedPolicy:
    """A GatewayPolicy the API server stores but the models refuse (its schema allows more than
    the gateway reads). It still claims the routes its `targetRefs` name, so they answer 503
    instead of being served without the policy."""

    namespace: str
    name: str
    targets: tuple[str, ...]  # the HTTPRoute names its targetRefs give
    problems: tuple[str, ...]

    @property
    def key(self) -> str:
        """`namespace/name`, as policies are keyed."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class RefusedGateway:
    """A Gateway the API server stores but the models refuse. It still holds the ports its
    listeners name (serving nothing on them), so a mistake in the Gateway that holds a port
    does not hand the port, and its callers, to another Gateway until it is fixed."""

    namespace: str
    name: str
    class_name: str
    created: str  # metadata.creationTimestamp
    ports: tuple[int, ...]

    @property
    def key(self) -> str:
        """`namespace/name`, as Gateways are keyed."""
        return f"{self.namespace}/{self.name}"


ResourceObject = Loaded | Resource | RefusedPolicy | RefusedGateway

R = TypeVar(
    "R",
    Gateway,
    HTTPRoute,
    GatewayBackend,
    GatewayPolicy,
    Service,
    GatewayClass,
    ReferenceGrant,
    GatewayClassParameters,
)


class ObjectKey(NamedTuple):
    """The identity of an object, as the status of every object is keyed."""

    kind: str
    namespace: str
    name: str


def object_key(resource: Resource) -> ObjectKey:
    """`(kind, namespace, name)` of a resource."""
    return ObjectKey(resource.kind, resource.metadata.namespace, resource.metadata.name)


@dataclass(frozen=True, slots=True)
class Entry(Generic[R]):
    """One input object and, when it was read from a file, where."""

    resource: R
    source: str | None = None
    # `namespace/name`, the identity used in references, and (kind, namespace, name), the one
    # statuses are keyed by (read often: made once).
    key: str = field(init=False, repr=False, compare=False)
    identity: ObjectKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.resource.metadata.key)
        object.__setattr__(self, "identity", object_key(self.resource))

    @property
    def generation(self) -> int:
        """`metadata.generation`, reported as every condition's `observedGeneration`."""
        return self.resource.metadata.generation

    @property
    def prefix(self) -> str:
        """`source: Kind namespace/name`, the start of every message about this object."""
        label = f"{self.resource.kind} {self.key}"
        return label if self.source is None else f"{self.source}: {label}"


@dataclass(frozen=True, slots=True)
class ObjectIndex:
    """The input objects by kind, each mapping in `namespace/name` order."""

    gateways: Mapping[str, Entry[Gateway]]
    routes: Mapping[str, Entry[HTTPRoute]]
    backends: Mapping[str, Entry[GatewayBackend]]
    services: Mapping[str, Entry[Service]]
    policies: Mapping[str, Entry[GatewayPolicy]]
    # Kubernetes mode: classes by name (cluster-scoped) and ReferenceGrants by namespace/name.
    classes: Mapping[str, Entry[GatewayClass]]
    grants: Mapping[str, Entry[ReferenceGrant]]
    # Kubernetes mode: policies the models refuse, which still fail their routes closed.
    refused: Mapping[str, RefusedPolicy] = field(default_factory=lambda: MappingProxyType({}))
    # Kubernetes mode: GatewayClassParameters by name (cluster-scoped), named by classes.
    parameters: Mapping[str, Entry[GatewayClassParameters]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Kubernetes mode: Gateways the models refuse, which still hold their ports.
    refused_gateways: Mapping[str, RefusedGateway] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Namespace → its labels, for listeners that take routes by a namespace selector.
    namespaces: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )


def _sorted(entries: dict[str, Entry[R]]) -> dict[str, Entry[R]]:
    return {key: entries[key] for key in sorted(entries)}


def indexed(item: Loaded | Resource) -> tuple[ObjectKey, Entry[Any]]:
    """An object's identity and its entry (a file's resource with where it was read)."""
    entry: Entry[Any] = (
        Entry(item.resource, str(item.source)) if isinstance(item, Loaded) else Entry(item)
    )
    return entry.identity, entry


def index_objects(
    objects: Iterable[ResourceObject],
    entry_of: Callable[[Loaded | Resource], tuple[ObjectKey, Entry[Any]]] = indexed,
) -> ObjectIndex:
    """Index the objects by kind and `namespace/name` (`entry_of`: how an object's identity and
    entry are made); raises ValueError on a duplicate."""
    by_kind: dict[str, dict[str, Entry[Any]]] = defaultdict(dict)
    refused: dict[str, RefusedPolicy] = {}
    refused_gateways: dict[str, RefusedGateway] = {}
    for item in objects:
        if isinstance(item, RefusedPolicy):
            refused[item.key] = item
            continue
        if isinstance(item, RefusedGateway):
            refused_gateways[item.key] = item
            continue
        identity, entry = entry_of(item)
        bucket = by_kind[identity.kind]
        # The loader reports duplicates and the API server cannot hold two: keeping either one
        # would make the result depend on input order.
        if entry.key in bucket:
            raise ValueError(f"{identity.kind} {entry.key} is given twice")
        bucket[entry.key] = entry
    namespaces = {key: e.resource.metadata.labels for key, e in by_kind["Namespace"].items()}
    return ObjectIndex(
        gateways=_sorted(by_kind["Gateway"]),
        routes=_sorted(by_kind["HTTPRoute"]),
        backends=_sorted(by_kind["GatewayBackend"]),
        services=_sorted(by_kind["Service"]),
        policies=_sorted(by_kind["GatewayPolicy"]),
        classes=_sorted(by_kind["GatewayClass"]),
        grants=_sorted(by_kind["ReferenceGrant"]),
        refused=MappingProxyType(dict(sorted(refused.items()))),
        parameters=_sorted(by_kind["GatewayClassParameters"]),
        refused_gateways=MappingProxyType(dict(sorted(refused_gateways.items()))),
        namespaces=MappingProxyType(dict(sorted(namespaces.items()))),
    )
