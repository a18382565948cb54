"""What the build's steps read of an object besides the object itself, as far as the object
says: the Services, backends and routes it names, whether it reads a file or an environment
variable, a route's age. Read once with the object's entry (`build_cache.py`), so a step's
inputs name exactly what it reads without walking the object again at every build."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..resources.loader import Loaded
from ..resources.models import GatewayBackend, GatewayPolicy, HTTPRoute, Resource
from .binding import policy_targets
from .objects import Entry, ObjectKey, indexed
from .routes import backend_keys
from .secret_sources import policy_secret_refs, reads_outside
from .service_refs import backend_services, policy_services
from .targets import reads_files

Names = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Facts:
    """What the steps that read an object read besides it, as far as the object says."""

    # The Services it names (a policy's keysets, a backend's targets).
    services: Names = ()
    # A policy names a Secret.
    secrets: bool = False
    # It reads a file or an environment variable (read again at every build).
    outside: bool = False
    # The backends a route's rules name.
    backends: Names = ()
    # The routes a policy's targetRefs name.
    targets: Names = ()
    # A policy lists credentials per target (their names are checked against its backends).
    per_target: bool = False
    # A route's creation timestamp ("" for none).
    created: str = ""


def indexed_with_facts(item: Loaded | Resource) -> tuple[ObjectKey, Entry[Any], Facts]:
    """`objects.indexed`, and what the object's steps read besides it, as far as it says."""
    identity, entry = indexed(item)
    return identity, entry, facts_of(entry.resource)


def facts_of(resource: Resource) -> Facts:
    """What the steps that read a resource read besides it, as far as it says."""
    if isinstance(resource, GatewayPolicy):
        backend = resource.spec.backend
        credentials = backend.credentials if backend is not None else None
        return Facts(
            policy_services(resource),
            secrets=any(policy_secret_refs(resource)),
            outside=reads_outside(resource),
            targets=policy_targets(resource),
            per_target=credentials is not None and bool(credentials.targets),
        )
    if isinstance(resource, GatewayBackend):
        return Facts(backend_services(resource), outside=reads_files(resource))
    if isinstance(resource, HTTPRoute):
        created = resource.metadata.creation_timestamp or ""
        return Facts(backends=backend_keys(resource), created=created)
    return Facts()
