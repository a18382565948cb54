"""Decisions about references between objects: which Gateway listeners a route is bound to, and
which policy governs which route."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from types import MappingProxyType

from ..resources.models import Gateway, GatewayPolicy, HTTPRoute, Listener, ParentRef
from .admission import Admission
from .hostnames import ANY_HOST, effective_hostnames
from .objects import Entry, RefusedPolicy

# For callers that pass no admission: every Gateway and listener given is served.
NOTHING_REFUSED = Admission()


# Route parent `Accepted=False` reasons (Gateway API).
NO_MATCHING_PARENT = "NoMatchingParent"
NOT_ALLOWED_BY_LISTENERS = "NotAllowedByListeners"
NO_MATCHING_LISTENER_HOSTNAME = "NoMatchingListenerHostname"


@dataclass(frozen=True, slots=True)
class BoundListener:
    """A listener that takes a route, and the hostnames the route is served for through it."""

    listener: Listener
    # The route's hostnames within the listener's; () for every host the listener takes.
    hostnames: tuple[str, ...]

    @property
    def name(self) -> str:
        """The listener's name."""
        return self.listener.name

    @property
    def port(self) -> int:
        """The listener's port."""
        return self.listener.port


@dataclass(frozen=True, slots=True)
class ParentBinding:
    """What one `spec.parentRefs[]` entry of a route resolves to."""

    index: int
    ref: ParentRef
    gateway: str
    # The listeners the route is served on through this parentRef (empty: none matches).
    listeners: tuple[BoundListener, ...] = ()
    # Why the parentRef names no existing Gateway (or listener), or a Gateway that is not
    # served; reported as a load error.
    problem: str | None = None
    # Why the matching listeners do not take this route, when none does, and the reason.
    not_allowed: str | None = None
    not_allowed_reason: str = NO_MATCHING_PARENT

    @property
    def accepted(self) -> bool:
        """The Gateway exists and at least one of its listeners takes the route."""
        return self.problem is None and bool(self.listeners)

    @property
    def refusal(self) -> str | None:
        """Why this parent does not take the route, or None when it does."""
        if self.problem is not None or self.listeners:
            return self.problem
        if self.not_allowed is not None:
            return f"spec.parentRefs[{self.index}]: Gateway {self.gateway}: {self.not_allowed}"
        section = "" if self.ref.section_name is None else f" {self.ref.section_name!r}"
        return (
            f"spec.parentRefs[{self.index}].port: Gateway {self.gateway} has no listener"
            f"{section} on port {self.ref.port}"
        )

    @property
    def reason(self) -> str:
        """The reason of the route parent's `Accepted=False` (see `refusal`)."""
        if self.problem is None and not self.listeners and self.not_allowed is not None:
            return self.not_allowed_reason
        return NO_MATCHING_PARENT


@dataclass(frozen=True, slots=True)
class RouteBinding:
    """Every parentRef of one route, resolved."""

    parents: tuple[ParentBinding, ...]

    @property
    def has_gateway(self) -> bool:
        """Some parentRef names an existing Gateway (a policy can attach to the route)."""
        return any(parent.problem is None for parent in self.parents)

    @property
    def ports(self) -> frozenset[int]:
        """The listener ports the route is served on."""
        return frozenset(listener.port for parent in self.parents for listener in parent.listeners)

    @property
    def served_on(self) -> dict[tuple[int, str], tuple[str, ...]]:
        """(port, listener hostname or ANY_HOST) → the hostnames the route is served for on
        that listener (a listener reached through two parentRefs counts once)."""
        return {
            (bound.port, (bound.listener.hostname or ANY_HOST).lower()): bound.hostnames
            for parent in self.parents
            for bound in parent.listeners
        }


def _take(
    route: HTTPRoute,
    listener: Listener,
    gateway: str,
    namespace: str,
    context: BindingContext,
) -> tuple[BoundListener | None, str, str]:
    """The listener bound to the route, or None with why not and the reason."""
    unserved = context.admission.listener_refusal(gateway, listener.name)
    if unserved is not None:
        why = f"listener {listener.name!r} is not served: {unserved.message}"
        return None, why, NO_MATCHING_PARENT
    labels = context.namespaces.get(route.metadata.namespace)
    refused = listener.takes(route.metadata.namespace, namespace, labels)
    if refused is not None:
        return None, refused, NOT_ALLOWED_BY_LISTENERS
    hostnames = effective_hostnames(listener.hostname, route.spec.hostnames)
    if hostnames is None:
        why = (
            f"listener {listener.name!r} takes hostname {listener.hostname} only, and none of "
            f"the route's spec.hostnames ({', '.join(route.spec.hostnames)}) is within it: add "
            "a hostname within it, or attach to another listener"
        )
        return None, why, NO_MATCHING_LISTENER_HOSTNAME
    return BoundListener(listener, hostnames), "", "Accepted"


def _refusal_reason(reasons: list[str]) -> str:
    """One reason for the refusals of every matching listener (Gateway API has one per parent)."""
    if reasons and all(r == NO_MATCHING_LISTENER_HOSTNAME for r in reasons):
        return NO_MATCHING_LISTENER_HOSTNAME
    if NOT_ALLOWED_BY_LISTENERS in reasons:
        return NOT_ALLOWED_BY_LISTENERS
    return NO_MATCHING_PARENT


@dataclass(frozen=True, slots=True)
class BindingContext:
    """What binding a route reads besides the Gateways: the Gateways and listeners that are not
    served, and each namespace's labels (for listeners taking routes by a selector)."""

    admission: Admission = NOTHING_REFUSED
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


NO_CONTEXT = BindingContext()


def bind_parent(
    route: HTTPRoute,
    index: int,
    gateways: Mapping[str, Entry[Gateway]],
    cluster: bool = False,
    context: BindingContext = NO_CONTEXT,
) -> ParentBinding | None:
    """Resolve one parentRef to its Gateway and the listeners matching its sectionName and port
    that take the route; None in a cluster when the Gateway is not one this controller serves
    (another controller's parentRef is none of its business)."""
    ref = route.spec.parent_refs[index]
    key = f"{ref.namespace or route.metadata.namespace}/{ref.name}"
    entry = gateways.get(key)
    if entry is None:
        if cluster:
            return None
        return ParentBinding(
            index, ref, key, problem=f"spec.parentRefs[{index}]: Gateway {key} not found"
        )
    unserved = context.admission.gateways.get(key)
    if unserved is not None:
        why = f"spec.parentRefs[{index}]: Gateway {key} is not served: {unserved.message}"
        return ParentBinding(index, ref, key, problem=why)
    listeners = entry.resource.spec.listeners
    names = {listener.name for listener in listeners}
    if ref.section_name is not None and ref.section_name not in names:
        return ParentBinding(
            index,
            ref,
            key,
            problem=(
                f"spec.parentRefs[{index}].sectionName: Gateway {key} has no listener "
                f"{ref.section_name!r} (listeners: {sorted(names)})"
            ),
        )
    matching = [
        listener
        for listener in listeners
        if (ref.section_name is None or listener.name == ref.section_name)
        and (ref.port is None or listener.port == ref.port)
    ]
    namespace = entry.resource.metadata.namespace
    verdicts = [_take(route, listener, key, namespace, context) for listener in matching]
    taking = tuple(bound for bound, _, _ in verdicts if bound is not None)
    if taking or not matching:
        return ParentBinding(index, ref, key, taking)
    whys = "; ".join(why for _, why, _ in verdicts)
    reason = _refusal_reason([r for _, _, r in verdicts])
    return ParentBinding(index, ref, key, (), not_allowed=whys, not_allowed_reason=reason)


def bind_routes(
    routes: Mapping[str, Entry[HTTPRoute]],
    gateways: Mapping[str, Entry[Gateway]],
    cluster: bool = False,
    context: BindingContext = NO_CONTEXT,
) -> dict[str, RouteBinding]:
    """Bind every route to the Gateways and listeners its parentRefs name (in a cluster, only
    the parentRefs to Gateways this controller serves count)."""
    return {key: bind_route(entry, gateways, cluster, context) for key, entry in routes.items()}


def bind_route(
    entry: Entry[HTTPRoute],
    gateways: Mapping[str, Entry[Gateway]],
    cluster: bool = False,
    context: BindingContext = NO_CONTEXT,
) -> RouteBinding:
    """Bind one route to the Gateways and listeners its parentRefs name."""
    parents = (
        bind_parent(entry.resource, i, gateways, cluster, context)
        for i in range(len(entry.resource.spec.parent_refs))
    )
    return RouteBinding(tuple(p for p in parents if p is not None))


def binding_errors(
    routes: Mapping[str, Entry[HTTPRoute]], bindings: Mapping[str, RouteBinding]
) -> list[str]:
    """The load errors of parentRefs that name no existing Gateway or listener."""
    return [
        f"{routes[key].prefix}: {parent.problem}"
        for key, binding in bindings.items()
        for parent in binding.parents
        if parent.problem is not None
    ]


@dataclass(frozen=True, slots=True)
class Attachment:
    """Which policy governs each route, and why each policy is not attached where it is not."""

    governing: Mapping[str, str]
    missing: Mapping[str, tuple[str, ...]]
    conflicts: Mapping[str, tuple[str, ...]]


def _claim(
    key: str,
    targets: Iterable[str],
    valid: bool,
    bindings: Mapping[str, RouteBinding],
    governing: dict[str, str],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Claim the policy's target routes (`namespace/name`) in `governing`; return its missing
    and conflicting ones."""
    missing: list[str] = []
    conflicts: list[str] = []
    for route in targets:
        binding = bindings.get(route)
        if binding is None:
            missing.append(f"HTTPRoute {route} not found")
        elif not binding.has_gateway:
            missing.append(f"HTTPRoute {route} is not attached to any Gateway")
        elif route in governing and governing[route] != key:
            conflicts.append(
                f"HTTPRoute {route} is already governed by GatewayPolicy {governing[route]}"
            )
        elif valid:
            governing[route] = key
        else:
            # An invalid policy still claims its routes so they fail closed (503).
            governing.setdefault(route, key)
    return tuple(missing), tuple(conflicts)


def attach_policies(
    policies: Mapping[str, Entry[GatewayPolicy]],
    valid: Set[str],
    bindings: Mapping[str, RouteBinding],
    refused: Mapping[str, RefusedPolicy] = MappingProxyType({}),
    targets_of: Callable[[Entry[GatewayPolicy]], Sequence[str]] | None = None,
) -> Attachment:
    """Attach policies to routes: the first by namespace/name wins, later ones conflict. A
    policy the models refused (`refused`) claims its routes like an invalid one. (`targets_of`:
    a policy's target routes, `policy_targets` unless given.)"""
    targets_of = targets_of or (lambda entry: policy_targets(entry.resource))
    governing: dict[str, str] = {}
    missing: dict[str, tuple[str, ...]] = {}
    conflicts: dict[str, tuple[str, ...]] = {}
    for key in sorted({*policies, *refused}):
        if key in policies:
            targets = targets_of(policies[key])
        else:
            targets = [f"{refused[key].namespace}/{name}" for name in refused[key].targets]
        missing[key], conflicts[key] = _claim(key, targets, key in valid, bindings, governing)
    return Attachment(governing, missing, conflicts)


def policy_targets(policy: GatewayPolicy) -> tuple[str, ...]:
    """The routes (`namespace/name`) a policy's targetRefs name."""
    namespace = policy.metadata.namespace
    return tuple(f"{namespace}/{ref.name}" for ref in policy.spec.target_refs)


def policy_ancestors(
    attachment: Attachment, bindings: Mapping[str, RouteBinding]
) -> dict[str, tuple[str, ...]]:
    """Policy → the Gateways its attached routes are served by (GEP-713 ancestors)."""
    ancestors: dict[str, set[str]] = {}
    for route, policy in attachment.governing.items():
        gateways = {parent.gateway for parent in bindings[route].parents if parent.accepted}
        ancestors.setdefault(policy, set()).update(gateways)
    return {policy: tuple(sorted(gateways)) for policy, gateways in ancestors.items()}
