"""Compile HTTPRoute rules into the per-listener route tables the data plane matches against."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from ..resources.models import (
    GATEWAY_API_GROUP,
    POLICY_API_GROUP,
    HTTPRoute,
    ReferenceGrant,
    RouteRule,
    parse_duration,
)
from .binding import RouteBinding
from .cluster import Reference
from .objects import Entry
from .snapshot import (
    DEFAULT_BACKEND_TIMEOUT,
    CompiledPolicy,
    CompiledRoute,
    CompiledTarget,
    compile_cors,
    route_sort_key,
)
from .targets import BackendTargets

# (route `namespace/name`, rule index): where a rule's backend is looked up.
RuleKey = tuple[str, int]
# A resolved backend: its targets in the resource's order (the first is a single target's).
Targets = tuple[CompiledTarget, ...]


@dataclass(frozen=True, slots=True)
class MissingBackend:
    """A rule whose backendRef names no GatewayBackend: the rule answers 503."""

    prefix: str
    field_path: str
    backend: str
    # Why it cannot be used, when it exists (a reference another namespace does not permit).
    refusal: str | None = None

    @property
    def problem(self) -> str:
        """What is wrong, by field path."""
        if self.refusal is not None:
            return f"{self.field_path}: {self.refusal}"
        return f"{self.field_path}: GatewayBackend {self.backend} not found"

    @property
    def message(self) -> str:
        """The load error, also the 503 text: `source: Kind ns/name: field: problem`."""
        return f"{self.prefix}: {self.problem}"


def resolve_backend(
    entry: Entry[HTTPRoute],
    rule_index: int,
    backends: Mapping[str, BackendTargets],
    grants: Mapping[str, Entry[ReferenceGrant]] | None = None,
) -> Targets | MissingBackend:
    """Resolve a rule's first backendRef (the one served) to its GatewayBackend's targets; with
    `grants` (a cluster), a backend in another namespace needs a ReferenceGrant."""
    route = entry.resource
    ref = route.spec.rules[rule_index].backend_refs[0]
    namespace = ref.namespace or route.metadata.namespace
    key = f"{namespace}/{ref.name}"
    field_path = f"spec.rules[{rule_index}].backendRefs[0]"
    backend = backends.get(key)
    if backend is None:
        return MissingBackend(entry.prefix, field_path, key)
    if grants is not None:
        reference = Reference(
            GATEWAY_API_GROUP,
            "HTTPRoute",
            route.metadata.namespace,
            POLICY_API_GROUP,
            "GatewayBackend",
            namespace,
            ref.name,
        )
        refusal = reference.refusal(grants)
        if refusal is not None:
            return MissingBackend(entry.prefix, field_path, key, refusal)
    if backend.refused:
        why = f"GatewayBackend {key} is not served: " + "; ".join(backend.problems)
        return MissingBackend(entry.prefix, field_path, key, why)
    return backend.targets


def resolve_rules(
    entry: Entry[HTTPRoute],
    backends: Mapping[str, BackendTargets],
    grants: Mapping[str, Entry[ReferenceGrant]] | None = None,
) -> tuple[Targets | MissingBackend, ...]:
    """Resolve the backend of each rule of one route, in rule order."""
    return tuple(
        resolve_backend(entry, rule_index, backends, grants)
        for rule_index in range(len(entry.resource.spec.rules))
    )


def backend_keys(route: HTTPRoute) -> tuple[str, ...]:
    """The GatewayBackend (`namespace/name`) each rule of a route names, in rule order."""
    return tuple(
        f"{rule.backend_refs[0].namespace or route.metadata.namespace}/{rule.backend_refs[0].name}"
        for rule in route.spec.rules
    )


def missing_backends(
    resolved: Mapping[RuleKey, Targets | MissingBackend],
) -> dict[str, list[MissingBackend]]:
    """Route `namespace/name` → its rules' missing backends, in rule order."""
    missing: dict[str, list[MissingBackend]] = {}
    for rule_key in sorted(resolved):
        target = resolved[rule_key]
        if isinstance(target, MissingBackend):
            missing.setdefault(rule_key[0], []).append(target)
    return missing


def backend_errors(resolved: Mapping[RuleKey, Targets | MissingBackend]) -> list[str]:
    """The load errors of rules whose backend is missing, in route and rule order."""
    return [m.message for found in missing_backends(resolved).values() for m in found]


def backend_timeout(rule: RouteRule) -> float:
    """How long to wait for the backend's response headers (`backendRequest`, else `request`)."""
    if rule.timeouts is not None:
        chosen = rule.timeouts.backend_request or rule.timeouts.request
        if chosen:
            return parse_duration(chosen)
    return DEFAULT_BACKEND_TIMEOUT


def for_rule(
    policy: CompiledPolicy | None, targets: Targets | MissingBackend
) -> CompiledPolicy | None:
    """The policy as a rule serves it: on a backend with a single target, the credential the
    policy lists for that target (if any) is its credential, in place of the default, resolved
    here so the reverse proxy path does what it always did."""
    if policy is None or not policy.target_credentials or isinstance(targets, MissingBackend):
        return policy
    if len(targets) != 1:
        return policy
    chosen = dict(policy.target_credentials).get(targets[0].name, policy.credentials)
    return replace(policy, credentials=chosen, target_credentials=())


def compile_rule(
    key: str,
    route: HTTPRoute,
    rule_index: int,
    targets: Targets | MissingBackend,
    policy: CompiledPolicy | None,
) -> tuple[CompiledRoute, ...]:
    """One compiled route per path match of a rule, sharing its CORS, backend and policy."""
    rule = route.spec.rules[rule_index]
    cors = next((compile_cors(f.cors) for f in rule.filters if f.type == "CORS"), None)
    timeout = backend_timeout(rule)
    policy = for_rule(policy, targets)
    return tuple(
        CompiledRoute(
            route=key,
            rule=rule_index,
            match_type=match.path.type,
            match_value=match.path.value,
            hostnames=tuple(route.spec.hostnames),
            cors=cors,
            target=None if isinstance(targets, MissingBackend) else targets[0],
            backend_timeout=timeout,
            policy=policy,
            broken=targets.message if isinstance(targets, MissingBackend) else None,
            targets=() if isinstance(targets, MissingBackend) else targets,
        )
        for match in rule.matches
    )


def compile_route(
    key: str,
    entry: Entry[HTTPRoute],
    rules: tuple[Targets | MissingBackend, ...],
    policy: CompiledPolicy | None,
) -> tuple[CompiledRoute, ...]:
    """Compile one route: its rules (`rules`: each one's backend) under its policy."""
    return tuple(
        compiled
        for rule_index, targets in enumerate(rules)
        for compiled in compile_rule(key, entry.resource, rule_index, targets, policy)
    )


# A route's listings: each port it is served on, with its compiled rules as served there.
Rows = tuple[tuple[int, tuple[CompiledRoute, ...]], ...]


def listener_tables(
    ports: Mapping[int, tuple[str, ...]],
    listed: Mapping[str, Rows],
    created: Mapping[str, str] = MappingProxyType({}),
) -> MappingProxyType[int, tuple[CompiledRoute, ...]]:
    """Each served port (`ports`: port → its listeners' hostnames) → the routes bound to its
    listeners (`listed`: each route's rules as `listener_rows` lists them), best match first
    (ties: the oldest route by `created`, its creation timestamp, then route name)."""
    tables: dict[int, list[CompiledRoute]] = {port: [] for port in sorted(ports)}
    # Gateway API: among equal matches the oldest route wins, then namespace/name; the rules
    # of one route keep their order. Added in that order, the stable sort keeps it for ties.
    for key in sorted(listed, key=lambda k: (created.get(k, ""), k)):
        for port, routes in listed[key]:
            tables[port].extend(routes)
    return MappingProxyType(
        {port: tuple(sorted(routes, key=route_sort_key)) for port, routes in tables.items()}
    )


def listener_rows(binding: RouteBinding, compiled: tuple[CompiledRoute, ...]) -> Rows:
    """A route's rules as each listener it is bound to serves them: with the hostnames it is
    served for there and the listener's hostname."""
    return tuple(
        (port, tuple(replace(r, hostnames=hostnames, listener_hostname=listener) for r in compiled))
        for (port, listener), hostnames in sorted(binding.served_on.items())
    )


def shadowed_matches(
    listeners: Mapping[int, tuple[CompiledRoute, ...]],
) -> dict[str, tuple[str, ...]]:
    """Route → each of its matches that an earlier route (older, or first by name) already
    takes on the same listener: requests never reach it there."""
    out: dict[str, list[str]] = {}
    for port, routes in listeners.items():
        taken: dict[tuple[str, str, str], list[CompiledRoute]] = {}
        for route in routes:
            match = (route.listener_hostname, route.match_type, route.match_value)
            earlier = taken.setdefault(match, [])
            winner = next(
                (e for e in earlier if e.route != route.route and _overlap(e, route)), None
            )
            if winner is not None:
                out.setdefault(route.route, []).append(
                    f"{route.match_type} {route.match_value} on port {port} is shadowed by "
                    f"HTTPRoute {winner.route}, which is older (or first by namespace/name)"
                )
            earlier.append(route)
    return {route: tuple(dict.fromkeys(lines)) for route, lines in out.items()}


def _overlap(a: CompiledRoute, b: CompiledRoute) -> bool:
    # No hostnames is every host; a wildcard is taken to overlap anything (erring on "shared").
    if not a.hostnames or not b.hostnames or any("*" in h for h in (*a.hostnames, *b.hostnames)):
        return True
    return not {h.lower() for h in a.hostnames}.isdisjoint(h.lower() for h in b.hostnames)
