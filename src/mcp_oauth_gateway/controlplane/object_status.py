"""Derive the status of every input object from the builder's decisions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType

from ..resources.models import GatewayBackend, GatewayPolicy, HTTPRoute, Service
from . import status
from .admission import Admission
from .binding import Attachment, RouteBinding
from .gateway_status import class_status, gateway_status
from .memo import Keep, computed
from .objects import Entry, ObjectIndex, ObjectKey
from .policies import PolicyResult
from .routes import MissingBackend, RuleKey, Targets, missing_backends
from .snapshot import service_address
from .targets import BackendTargets


def policy_conditions(
    policies: Mapping[str, Entry[GatewayPolicy]],
    results: Mapping[str, PolicyResult],
    attachment: Attachment,
    at: str,
    keep: Keep[str, tuple[status.Condition, ...]] = computed,
) -> dict[str, tuple[status.Condition, ...]]:
    """Each policy's `Accepted` and `Attached` (DESIGN §3). Through `keep` a condition that says
    what it said before keeps the time it first said it (Kubernetes' `lastTransitionTime`)."""
    out: dict[str, tuple[status.Condition, ...]] = {}
    for key in sorted(policies):
        generation = policies[key].generation
        problems = results[key].problems
        missing, conflicts = attachment.missing[key], attachment.conflicts[key]
        out[key] = keep(
            key,
            (generation, problems, missing, conflicts),
            lambda generation, problems, missing, conflicts: (
                status.accepted(list(problems), generation, at),
                status.attached(not problems, list(missing), list(conflicts), generation, at),
            ),
        )
    return out


def attached_routes(bindings: Mapping[str, RouteBinding]) -> Counter[tuple[str, str]]:
    """(Gateway `namespace/name`, listener name) → how many routes it serves."""
    return Counter(
        pair
        for binding in bindings.values()
        for pair in {
            (parent.gateway, listener.name)
            for parent in binding.parents
            for listener in parent.listeners
        }
    )


def route_status(
    entry: Entry[HTTPRoute],
    binding: RouteBinding,
    missing: list[MissingBackend],
    at: str,
    shadowed: tuple[str, ...] = (),
) -> status.ObjectStatus:
    """Per parentRef: `Accepted` by that parent, and `ResolvedRefs` for the route's backends."""
    generation = entry.generation
    resolved = status.route_resolved_refs(
        [m.problem for m in missing],
        generation,
        at,
        not_permitted=any(m.refusal is not None for m in missing),
    )
    parents = tuple(
        status.ParentStatus(
            parent.ref,
            (
                status.route_accepted(
                    parent.refusal, parent.gateway, generation, at, shadowed, parent.reason
                ),
                resolved,
            ),
        )
        for parent in binding.parents
    )
    return status.ObjectStatus(parents=parents)


def backend_status(
    entry: Entry[GatewayBackend], targets: BackendTargets | None, at: str
) -> status.ObjectStatus:
    """`Accepted`, naming the targets the backend sends to (each by name when it has several),
    or why it is not served; `ResolvedRefs` when it names Services."""
    generation = entry.generation
    if targets is None or targets.refused:
        problems = list(targets.problems) if targets is not None else []
        return status.ObjectStatus((status.backend_refused(problems, generation, at),))
    addresses = [t.url for t in targets.targets]
    if len(addresses) == 1:
        target = addresses[0]
    else:
        names = [t.name for t in targets.targets]
        target = "s " + ", ".join(f"{n} {a}" for n, a in zip(names, addresses, strict=True))
    conditions = [status.backend_accepted(target, generation, at)]
    if any(t.service is not None for t in entry.resource.spec.mcp.targets):
        conditions.append(status.backend_resolved_refs(list(targets.unresolved), generation, at))
    return status.ObjectStatus(tuple(conditions))


def service_status(entry: Entry[Service], at: str) -> status.ObjectStatus:
    """`Accepted` when standalone mode can resolve the Service's address."""
    service = entry.resource
    return status.ObjectStatus(
        (
            status.service_accepted(
                service.spec.type, service_address(service), entry.generation, at
            ),
        )
    )


def derive_statuses(
    index: ObjectIndex,
    bindings: Mapping[str, RouteBinding],
    resolved: Mapping[RuleKey, Targets | MissingBackend],
    policies: Mapping[str, tuple[status.Condition, ...]],
    at: str,
    shadowed: Mapping[str, tuple[str, ...]] = MappingProxyType({}),
    admission: Admission | None = None,
    backends: Mapping[str, BackendTargets] = MappingProxyType({}),
    keep: Keep[ObjectKey, status.ObjectStatus] = computed,
) -> MappingProxyType[ObjectKey, status.ObjectStatus]:
    """The status of every input object, keyed by (kind, namespace, name); `shadowed`: the
    matches of each route that an older route takes; `admission`: what is not served. Through
    `keep` a status that says what it said before keeps its conditions' times."""
    admission = admission or Admission()
    out: dict[ObjectKey, status.ObjectStatus] = {}
    attached = attached_routes(bindings)
    for gateway in index.gateways.values():
        out[gateway.identity] = gateway_status(gateway, attached, admission, at)
    missing = missing_backends(resolved)
    for key, route in index.routes.items():
        lost, hidden = tuple(missing.get(key, ())), shadowed.get(key, ())
        identity = route.identity
        out[identity] = keep(
            identity,
            (route, bindings[key], lost, hidden),
            lambda route, binding, lost, hidden: route_status(
                route, binding, list(lost), at, hidden
            ),
        )
    for key, backend in index.backends.items():
        identity, targets = backend.identity, backends.get(key)
        out[identity] = keep(
            identity,
            (backend, targets),
            lambda backend, targets: backend_status(backend, targets, at),
        )
    for service in index.services.values():
        identity = service.identity
        out[identity] = keep(identity, (service,), lambda service: service_status(service, at))
    for key, policy in index.policies.items():
        out[policy.identity] = status.ObjectStatus(policies[key])
    for name, gateway_class in index.classes.items():
        rule = admission.classes.get(name)
        out[gateway_class.identity] = class_status(gateway_class, rule, at)
    return MappingProxyType(dict(sorted(out.items())))
