"""Resource objects → runtime snapshot + the status of every object, as one pure function.

Files (standalone) and the API server (Kubernetes mode) feed the same function. It reads no
clock: the caller passes the time stamped on conditions, and the same objects in any order give
an equal result. Given the `BuildCache` of the builds before, it takes from there what the same
inputs gave (`build_cache.py`), so a change costs what it changed; the result is the one a
build without it gives, except that a condition that says what it said keeps the time it first
said it (Kubernetes' `lastTransitionTime`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import MappingProxyType

from ..resources.loader import LoadResult
from ..resources.models import GatewayPolicy
from . import status
from .admission import Admission, admission_errors
from .binding import (
    Attachment,
    BindingContext,
    RouteBinding,
    binding_errors,
)
from .build_cache import BuildCache
from .collector import collector_paused
from .deployment import Deployment
from .memo import Keep, computed
from .object_status import derive_statuses, policy_conditions
from .objects import (
    Entry,
    ObjectIndex,
    ObjectKey,
    RefusedPolicy,
    ResourceObject,
    index_objects,
)
from .policies import PolicyResult, fetch_targets, uses_discovery
from .routes import (
    MissingBackend,
    Rows,
    RuleKey,
    Targets,
    backend_errors,
    listener_tables,
    shadowed_matches,
)
from .snapshot import CompiledPolicy, PolicyReport, Snapshot
from .targets import BackendTargets


@dataclass(frozen=True, slots=True)
class BuildResult:
    """What the data plane serves, and the status to report on every input object."""

    snapshot: Snapshot
    statuses: MappingProxyType[ObjectKey, status.ObjectStatus]


def policy_reports(
    policies: Mapping[str, Entry[GatewayPolicy]],
    results: Mapping[str, PolicyResult],
    conditions: Mapping[str, tuple[status.Condition, ...]],
    ancestors: Mapping[str, tuple[str, ...]],
    keep: Keep[str, PolicyReport] = computed,
) -> tuple[PolicyReport, ...]:
    """Each policy's conditions and the keyset and discovery URLs it depends on."""
    reports = []
    for key in sorted(policies):
        entry, result, gateways = policies[key], results[key], ancestors.get(key, ())
        reports.append(
            keep(
                key,
                (entry, result.compiled, result.unresolved, conditions[key], gateways),
                lambda entry, compiled, unresolved, conditions, gateways: policy_report(
                    entry, compiled, unresolved, conditions, gateways
                ),
            )
        )
    return tuple(reports)


def policy_report(
    entry: Entry[GatewayPolicy],
    compiled: CompiledPolicy,
    unresolved: tuple[str, ...],
    conditions: tuple[status.Condition, ...],
    ancestors: tuple[str, ...],
) -> PolicyReport:
    """One policy's conditions and the keyset and discovery URLs it depends on."""
    providers = compiled.providers
    discovery = tuple(p.discovery_url for p in providers) if uses_discovery(compiled) else ()
    return PolicyReport(
        entry.key,
        entry.source or "",
        entry.generation,
        conditions,
        tuple(p.keyset.url for p in providers)
        + tuple(w.provider.keyset.url for w in compiled.workload_issuers),
        discovery,
        unresolved,
        ancestors,
        tuple(p.label for p in providers) + tuple(w.label for w in compiled.workload_issuers),
    )


def build_from_objects(
    objects: Iterable[ResourceObject],
    *,
    at: str,
    deployment: Deployment | None = None,
    cache: BuildCache | None = None,
    statuses: bool = True,
) -> BuildResult:
    """Compile resource objects (`at`: the conditions' transition time) into snapshot + status,
    for the given deployment (one process unless told otherwise). With `cache` (one per
    watcher or controller) what the last build computed from the same inputs is taken from
    there; `statuses=False` leaves out the objects' statuses (files report none)."""
    memo = cache or BuildCache()
    with collector_paused():
        try:
            result = _build(objects, at, deployment or Deployment(), memo, statuses)
        except BaseException:
            memo.end(keep=False)
            raise
    memo.end(keep=True)
    return result


@dataclass(frozen=True, slots=True)
class _Decided:
    """What the build decided of each object, before the snapshot is made of it."""

    index: ObjectIndex
    admission: Admission
    bindings: Mapping[str, RouteBinding]
    results: Mapping[str, PolicyResult]
    attachment: Attachment
    backends: Mapping[str, BackendTargets]
    resolved: Mapping[RuleKey, Targets | MissingBackend]
    # Each route's rules, compiled, as each listener it is bound to serves them.
    listed: Mapping[str, Rows]


def _decide(
    objects: Iterable[ResourceObject], deployment: Deployment, cache: BuildCache
) -> _Decided:
    cluster = deployment.cluster
    index, admission = cache.admit(index_objects(objects, cache.entry_of), cluster)
    context = BindingContext(admission, index.namespaces)
    bindings = cache.bind(index, cluster is not None, context)
    if cluster is not None:
        # In a cluster, routes none of whose parents are this controller's are not its own.
        index = replace(
            index, routes={k: e for k, e in index.routes.items() if bindings[k].parents}
        )
    results = cache.compile_policies(index, deployment)
    valid = {key for key, result in results.items() if result.valid}
    attachment = cache.attach(index, valid, bindings)
    results.update(cache.refused_results(index.refused, refused_result))
    backends = cache.compile_backends(index, cluster)
    resolved = cache.resolve(index.routes, backends, index.grants if cluster is not None else None)
    # Before the routes take their policies: a credential for a target no backend has makes
    # its policy invalid (its routes fail closed).
    cache.check_target_names(results, index, attachment, resolved)
    governed = {route: results[key].compiled for route, key in attachment.governing.items()}
    listed = cache.compile_routes(index.routes, resolved, governed, bindings)
    return _Decided(index, admission, bindings, results, attachment, backends, resolved, listed)


def _build(
    objects: Iterable[ResourceObject],
    at: str,
    deployment: Deployment,
    cache: BuildCache,
    statuses: bool,
) -> BuildResult:
    decided = _decide(objects, deployment, cache)
    index, admission, bindings, results = (
        decided.index,
        decided.admission,
        decided.bindings,
        decided.results,
    )
    attachment = decided.attachment
    conditions = policy_conditions(index.policies, results, attachment, at, cache.conditions.get)
    # In a cluster only what governs a route this controller serves is fetched: a policy on
    # another controller's routes must not hold this replica's readiness (nor cost fetches).
    fetched: Mapping[str, PolicyResult] = results
    if deployment.cluster is not None:
        fetched = {key: results[key] for key in set(attachment.governing.values())}
    keysets, discovery_urls = fetch_targets(fetched)
    ancestors = cache.ancestors(attachment, bindings)
    errors = admission_errors(index, admission) + binding_errors(index.routes, bindings)
    snapshot = Snapshot(
        listeners=listener_tables(admission.ports, decided.listed, cache.created(index.routes)),
        policies=policy_reports(index.policies, results, conditions, ancestors, cache.reports.get),
        errors=tuple(errors + backend_errors(decided.resolved)),
        keysets=MappingProxyType(keysets),
        discovery_urls=MappingProxyType(discovery_urls),
        built_at=at,
        listener_hosts=MappingProxyType(dict(admission.ports)),
    )
    if not statuses:
        return BuildResult(snapshot, MappingProxyType({}))
    derived = derive_statuses(
        index,
        bindings,
        decided.resolved,
        conditions,
        at,
        shadowed_matches(snapshot.listeners),
        admission,
        decided.backends,
        cache.statuses.get,
    )
    return BuildResult(snapshot, derived)


def refused_result(stand_in: RefusedPolicy) -> PolicyResult:
    """What a policy the models refused compiles to: invalid, so its routes answer 503."""
    why = f"GatewayPolicy {stand_in.key} is invalid: " + "; ".join(stand_in.problems)
    return PolicyResult(CompiledPolicy(stand_in.key, (), None, None, False, invalid=why), (why,))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the entry point for loaded files ------------------------------------------------------


def build_snapshot(
    loaded: LoadResult, deployment: Deployment | None = None, cache: BuildCache | None = None
) -> Snapshot:
    """Resolve references, compile policies and build route tables; never raises for bad input.
    (`cache`: as `build_from_objects`; files have no status to write, so none is derived.)"""
    built = build_from_objects(
        loaded.resources, at=_now(), deployment=deployment, cache=cache, statuses=False
    )
    snapshot = built.snapshot
    return replace(snapshot, errors=tuple(loaded.errors) + snapshot.errors)
