"""Resource objects → runtime snapshot + the status of every object, as one pure function.

Files (standalone) and the API server (Kubernetes mode) feed the same function. It reads no
clock and does no I/O: the caller passes the time stamped on conditions, and the same objects in
any order give an equal result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import MappingProxyType

from ..resources.loader import LoadResult
from ..resources.models import GatewayPolicy
from . import status
from .admission import admission_errors, admit
from .binding import (
    Attachment,
    BindingContext,
    RouteBinding,
    attach_policies,
    bind_routes,
    binding_errors,
)
from .collector import collector_paused
from .deployment import Deployment
from .object_status import derive_statuses, policy_conditions
from .objects import (
    Entry,
    ObjectIndex,
    ObjectKey,
    RefusedPolicy,
    ResourceObject,
    index_objects,
)
from .policies import PolicyResult, compile_policies, fetch_targets, uses_discovery
from .routes import (
    backend_errors,
    compile_routes,
    listener_tables,
    resolve_backends,
    shadowed_matches,
)
from .service_refs import ServiceRefs
from .snapshot import CompiledPolicy, PolicyReport, Snapshot
from .target_credentials import check_target_names
from .targets import compile_backends


@dataclass(frozen=True, slots=True)
class BuildResult:
    """What the data plane serves, and the status to report on every input object."""

    snapshot: Snapshot
    statuses: MappingProxyType[ObjectKey, status.ObjectStatus]


def policy_ancestors(
    attachment: Attachment, bindings: Mapping[str, RouteBinding]
) -> dict[str, tuple[str, ...]]:
    """Policy → the Gateways its attached routes are served by (GEP-713 ancestors)."""
    ancestors: dict[str, set[str]] = {}
    for route, policy in attachment.governing.items():
        gateways = {parent.gateway for parent in bindings[route].parents if parent.accepted}
        ancestors.setdefault(policy, set()).update(gateways)
    return {policy: tuple(sorted(gateways)) for policy, gateways in ancestors.items()}


def policy_reports(
    policies: Mapping[str, Entry[GatewayPolicy]],
    results: Mapping[str, PolicyResult],
    conditions: Mapping[str, tuple[status.Condition, ...]],
    ancestors: Mapping[str, tuple[str, ...]],
) -> tuple[PolicyReport, ...]:
    """Each policy's conditions and the keyset and discovery URLs it depends on."""
    reports = []
    for key in sorted(policies):
        entry, compiled = policies[key], results[key].compiled
        providers = compiled.providers
        discovery = tuple(p.discovery_url for p in providers) if uses_discovery(compiled) else ()
        reports.append(
            PolicyReport(
                key,
                entry.source or "",
                entry.generation,
                conditions[key],
                tuple(p.keyset.url for p in providers)
                + tuple(w.provider.keyset.url for w in compiled.workload_issuers),
                discovery,
                results[key].unresolved,
                ancestors.get(key, ()),
                tuple(p.label for p in providers)
                + tuple(w.label for w in compiled.workload_issuers),
            )
        )
    return tuple(reports)


def build_from_objects(
    objects: Iterable[ResourceObject], *, at: str, deployment: Deployment | None = None
) -> BuildResult:
    """Compile resource objects (`at`: the conditions' transition time) into snapshot + status,
    for the given deployment (one process unless told otherwise)."""
    with collector_paused():
        return _build(objects, at, deployment or Deployment())


def _build(objects: Iterable[ResourceObject], at: str, deployment: Deployment) -> BuildResult:
    cluster = deployment.cluster
    index, admission = admit(index_objects(objects), cluster)
    context = BindingContext(admission, index.namespaces)
    bindings = bind_routes(index.routes, index.gateways, cluster is not None, context)
    if cluster is not None:
        # In a cluster, routes none of whose parents are this controller's are not its own.
        index = replace(
            index, routes={k: e for k, e in index.routes.items() if bindings[k].parents}
        )
    results = compile_policies(index.policies, index.services, deployment, index.grants)
    valid = {key for key, result in results.items() if result.valid}
    attachment = attach_policies(index.policies, valid, bindings, index.refused)
    results.update({key: refused_result(stand_in) for key, stand_in in index.refused.items()})
    services = ServiceRefs(
        {k: e.resource for k, e in index.services.items()}, index.grants, cluster
    )
    backends = compile_backends(index.backends, services)
    resolved = resolve_backends(
        index.routes, backends, index.grants if cluster is not None else None
    )
    # Before the routes take their policies: a credential for a target no backend has makes
    # its policy invalid (its routes fail closed).
    check_target_names(results, index.policies, attachment, index.routes, resolved)
    governed = {route: results[key].compiled for route, key in attachment.governing.items()}
    compiled = compile_routes(index.routes, resolved, governed)
    conditions = policy_conditions(index.policies, results, attachment, at)
    # In a cluster only what governs a route this controller serves is fetched: a policy on
    # another controller's routes must not hold this replica's readiness (nor cost fetches).
    fetched = results
    if cluster is not None:
        fetched = {key: results[key] for key in set(attachment.governing.values())}
    keysets, discovery_urls = fetch_targets(fetched)
    ancestors = policy_ancestors(attachment, bindings)
    errors = admission_errors(index, admission) + binding_errors(index.routes, bindings)
    snapshot = Snapshot(
        listeners=listener_tables(admission.ports, bindings, compiled, creation_times(index)),
        policies=policy_reports(index.policies, results, conditions, ancestors),
        errors=tuple(errors + backend_errors(resolved)),
        keysets=MappingProxyType(keysets),
        discovery_urls=MappingProxyType(discovery_urls),
        built_at=at,
        listener_hosts=MappingProxyType(dict(admission.ports)),
    )
    shadowed = shadowed_matches(snapshot.listeners)
    statuses = derive_statuses(
        index, bindings, resolved, conditions, at, shadowed, admission, backends
    )
    return BuildResult(snapshot, statuses)


def creation_times(index: ObjectIndex) -> dict[str, str]:
    """Route → its creation timestamp (empty when it has none, as in files)."""
    return {
        key: entry.resource.metadata.creation_timestamp or "" for key, entry in index.routes.items()
    }


def refused_result(stand_in: RefusedPolicy) -> PolicyResult:
    """What a policy the models refused compiles to: invalid, so its routes answer 503."""
    why = f"GatewayPolicy {stand_in.key} is invalid: " + "; ".join(stand_in.problems)
    return PolicyResult(CompiledPolicy(stand_in.key, (), None, None, False, invalid=why), (why,))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the entry point for loaded files ------------------------------------------------------


def build_snapshot(loaded: LoadResult, deployment: Deployment | None = None) -> Snapshot:
    """Resolve references, compile policies and build route tables; never raises for bad input."""
    snapshot = build_from_objects(loaded.resources, at=_now(), deployment=deployment).snapshot
    return replace(snapshot, errors=tuple(loaded.errors) + snapshot.errors)
