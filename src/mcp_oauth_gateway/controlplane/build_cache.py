"""The builder's steps, each result kept from one build to the next (`memo.py`), so that a build
recomputes what its changed objects reach and takes the rest from the last build: the same
model objects give the same entries, bindings, compiled policies, backends and routes.

Each step is given exactly what it reads, and its inputs are exactly that:
- a route's binding: the route, and (one token for them all) the Gateways, what the admission
  refused, the namespaces' labels and whether the objects come from a cluster;
- a policy: the policy, the Services its keysets name, the ReferenceGrants, and the deployment
  (without the cluster's Secrets unless it names one); a policy that reads a file or an
  environment variable is compiled at every build;
- a backend: the backend, the Services its targets name, the ReferenceGrants and the cluster
  (without its Secrets); one that reads a CA file is resolved at every build;
- a route's rules: the route, the backends they name (and in a cluster the ReferenceGrants);
  its compiled rules: the route, those backends' targets and the policy that governs it; as
  listed per listener: those and its binding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..resources.loader import Loaded
from ..resources.models import GatewayBackend, GatewayPolicy, HTTPRoute, ReferenceGrant, Resource
from . import status
from .admission import Admission, admit
from .binding import Attachment, BindingContext, RouteBinding, bind_route
from .cluster import Cluster
from .cluster_secrets import ClusterSecrets
from .deployment import Deployment
from .memo import Memo, Tokens
from .objects import Entry, ObjectIndex, ObjectKey, RefusedPolicy, indexed
from .policies import PolicyResult, compile_policy
from .routes import (
    MissingBackend,
    Rows,
    RuleKey,
    Targets,
    backend_keys,
    compile_route,
    listener_rows,
    resolve_rules,
)
from .secret_sources import policy_secret_refs, reads_outside
from .service_refs import ServiceRefs, backend_services, policy_services
from .snapshot import CompiledPolicy, CompiledRoute, PolicyReport
from .target_credentials import check_target_names
from .targets import BackendTargets, compile_targets, reads_files

Admitted = tuple[Mapping[str, Any], Mapping[str, Any], Admission]
Names = tuple[str, ...]


class BuildCache:
    """What the last build computed, step by step (one per watcher or controller: builds run
    one at a time)."""

    def __init__(self) -> None:
        self.tokens = Tokens()
        self.entries: Memo[int, tuple[ObjectKey, Entry[Any]]] = Memo()
        self.admitted: Memo[str, Admitted] = Memo()
        self.bindings: Memo[str, RouteBinding] = Memo()
        self.policies: Memo[str, PolicyResult] = Memo()
        self.refused: Memo[str, PolicyResult] = Memo()
        self.checked: Memo[str, PolicyResult] = Memo()
        self.backends: Memo[str, BackendTargets] = Memo()
        self.backend_keys: Memo[str, tuple[str, ...]] = Memo()
        self.policy_facts: Memo[str, PolicyFacts] = Memo()
        self.backend_facts: Memo[str, BackendFacts] = Memo()
        self.resolved: Memo[str, tuple[Targets | MissingBackend, ...]] = Memo()
        self.routes: Memo[str, tuple[CompiledRoute, ...]] = Memo()
        self.rows: Memo[str, Rows] = Memo()
        self.conditions: Memo[str, tuple[status.Condition, ...]] = Memo()
        self.reports: Memo[str, PolicyReport] = Memo()
        self.statuses: Memo[ObjectKey, status.ObjectStatus] = Memo()

    def end(self, keep: bool) -> None:
        """The build ended: keep what it used, or (it failed) what the one before used."""
        self.tokens.end(keep)
        for memo in self.memos():
            memo.end(keep)

    def memos(self) -> tuple[Memo[Any, Any], ...]:
        """Every step's memo."""
        return tuple(value for value in vars(self).values() if isinstance(value, Memo))

    # --- the objects -------------------------------------------------------------------------

    def entry_of(self, item: Loaded | Resource) -> tuple[ObjectKey, Entry[Any]]:
        """An object's identity and entry, the same entry while it is the same object."""
        return self.entries.get(id(item), (item,), indexed)

    def admit(self, index: ObjectIndex, cluster: Cluster | None) -> tuple[ObjectIndex, Admission]:
        """`admission.admit`, which reads the classes, their parameters, the Gateways (and
        those the models refused) and the controller's name."""
        ours = None if cluster is None else Cluster(controller_name=cluster.controller_name)
        refused = tuple(
            (g.namespace, g.name, g.class_name, g.created, g.ports)
            for g in index.refused_gateways.values()
        )
        inputs = (
            ours is None,
            "" if ours is None else ours.controller_name,
            tuple(index.classes.values()),
            tuple(index.parameters.values()),
            tuple(index.gateways.values()),
            refused,
        )

        def decide(*_: object) -> Admitted:
            narrowed, admission = admit(index, ours)
            return narrowed.classes, narrowed.gateways, admission

        classes, gateways, admission = self.admitted.get("", inputs, decide)
        return replace(index, classes=classes, gateways=gateways), admission

    def bind(
        self, index: ObjectIndex, cluster: bool, context: BindingContext
    ) -> dict[str, RouteBinding]:
        """`binding.bind_route` for every route."""
        labels = tuple(item for pair in context.namespaces.items() for item in pair)
        gateways = tuple(index.gateways.values())
        token = self.tokens.of("binding", (cluster, context.admission, gateways, labels))

        def bound(entry: Entry[HTTPRoute], _: object) -> RouteBinding:
            return bind_route(entry, index.gateways, cluster, context)

        return {
            key: self.bindings.get(key, (entry, token), bound)
            for key, entry in index.routes.items()
        }

    # --- policies and backends -----------------------------------------------------------------

    def compile_policies(
        self, index: ObjectIndex, deployment: Deployment
    ) -> dict[str, PolicyResult]:
        """`policies.compile_policy` for every policy, in `namespace/name` order."""
        grants = self.tokens.of("grants", tuple(index.grants.values()))
        sealed = without_secrets(deployment)
        whole = self.tokens.of_value("deployment", deployment)
        narrow = self.tokens.of_value("deployment without secrets", sealed)
        out = {}
        for key in sorted(index.policies):
            policy = index.policies[key].resource
            secrets, named, outside = self.policy_facts.get(key, (policy,), policy_facts)
            given = deployment if secrets else sealed

            def compiled(
                policy: GatewayPolicy, *_: object, given: Deployment = given, named: Names = named
            ) -> PolicyResult:
                return compile_policy(policy, services_refs(index, named, given.cluster), given)

            # Read from outside the objects: compiled anew (an input no other build has).
            fresh = object() if outside else None
            services = (index.services.get(name) for name in named)
            inputs = (policy, grants, whole if secrets else narrow, fresh, named, *services)
            out[key] = self.policies.get(key, inputs, compiled)
        return out

    def refused_results(
        self, refused: Mapping[str, RefusedPolicy], make: Callable[[RefusedPolicy], PolicyResult]
    ) -> dict[str, PolicyResult]:
        """`make` for each policy the models refused (a stand-in is compared by its fields)."""
        return {
            key: self.refused.get(
                key,
                (stand_in.namespace, stand_in.name, stand_in.targets, stand_in.problems),
                lambda *_, stand_in=stand_in: make(stand_in),
            )
            for key, stand_in in refused.items()
        }

    def compile_backends(
        self, index: ObjectIndex, cluster: Cluster | None
    ) -> dict[str, BackendTargets]:
        """`targets.compile_targets` for every backend."""
        grants = self.tokens.of("grants", tuple(index.grants.values()))
        sealed = None if cluster is None else replace(cluster, secrets=ClusterSecrets())
        token = self.tokens.of_value("cluster without secrets", sealed)
        out = {}
        for key, entry in index.backends.items():
            named, outside = self.backend_facts.get(key, (entry.resource,), backend_facts)

            def resolved(
                entry: Entry[GatewayBackend], *_: object, named: Names = named
            ) -> BackendTargets:
                return compile_targets(entry, services_refs(index, named, sealed))

            fresh = object() if outside else None
            services = (index.services.get(name) for name in named)
            inputs = (entry, grants, token, fresh, named, *services)
            out[key] = self.backends.get(key, inputs, resolved)
        return out

    def check_target_names(
        self,
        results: dict[str, PolicyResult],
        index: ObjectIndex,
        attachment: Attachment,
        resolved: Mapping[RuleKey, Targets | MissingBackend],
    ) -> None:
        """`target_credentials.check_target_names`, each policy it makes invalid the same
        result while the same problems make it so."""
        before = dict(results)
        check_target_names(results, index.policies, attachment, index.routes, resolved)
        for key, result in results.items():
            if result is not before[key]:
                results[key] = self.checked.get(
                    key, (before[key], result.problems), lambda *_, made=result: made
                )

    # --- routes --------------------------------------------------------------------------------

    def resolve(
        self,
        routes: Mapping[str, Entry[HTTPRoute]],
        backends: Mapping[str, BackendTargets],
        grants: Mapping[str, Entry[ReferenceGrant]] | None,
    ) -> dict[RuleKey, Targets | MissingBackend]:
        """`routes.resolve_rules` for every route, by (route, rule)."""
        token = None if grants is None else self.tokens.of("grants", tuple(grants.values()))
        out: dict[RuleKey, Targets | MissingBackend] = {}
        for key, entry in routes.items():
            names = self.backend_keys.get(key, (entry,), lambda e: backend_keys(e.resource))

            def rules_of(
                entry: Entry[HTTPRoute], _: object, names: Names, *named: BackendTargets | None
            ) -> tuple[Targets | MissingBackend, ...]:
                given = {n: b for n, b in zip(names, named, strict=True) if b is not None}
                return resolve_rules(entry, given, grants)

            named = (backends.get(name) for name in names)
            rules = self.resolved.get(key, (entry, token, names, *named), rules_of)
            out.update(((key, i), found) for i, found in enumerate(rules))
        return out

    def compile_routes(
        self,
        routes: Mapping[str, Entry[HTTPRoute]],
        resolved: Mapping[RuleKey, Targets | MissingBackend],
        governed: Mapping[str, CompiledPolicy],
    ) -> dict[str, tuple[CompiledRoute, ...]]:
        """`routes.compile_route` for every route."""
        out = {}
        for key, entry in routes.items():
            rules = (resolved[key, i] for i in range(len(entry.resource.spec.rules)))
            out[key] = self.routes.get(
                key,
                (entry, governed.get(key), *rules),
                lambda e, p, *r, key=key: compile_route(key, e, r, p),
            )
        return out

    def rows_of(
        self,
        bindings: Mapping[str, RouteBinding],
        compiled: Mapping[str, tuple[CompiledRoute, ...]],
    ) -> Callable[[str], Rows]:
        """`routes.listener_rows` by route key, for `routes.listener_tables`."""
        return lambda key: self.rows.get(key, (bindings[key], compiled[key]), listener_rows)


# Of a policy: whether it names a Secret, the Services it names, whether it reads a file or an
# environment variable.
PolicyFacts = tuple[bool, Names, bool]
# Of a backend: the Services it names, whether it reads a file.
BackendFacts = tuple[Names, bool]


def policy_facts(policy: GatewayPolicy) -> PolicyFacts:
    """What compiling a policy reads besides the policy, as far as the policy says."""
    return any(policy_secret_refs(policy)), policy_services(policy), reads_outside(policy)


def backend_facts(backend: GatewayBackend) -> BackendFacts:
    """What resolving a backend reads besides the backend, as far as the backend says."""
    return backend_services(backend), reads_files(backend)


def without_secrets(deployment: Deployment) -> Deployment:
    """The deployment as a policy that names no Secret is given it: its Secrets left out, so
    that a change to them does not compile such a policy again."""
    cluster = deployment.cluster
    if cluster is None:
        return deployment
    return replace(deployment, cluster=replace(cluster, secrets=ClusterSecrets()))


def services_refs(
    index: ObjectIndex, named: tuple[str, ...], cluster: Cluster | None
) -> ServiceRefs:
    """What an object's Service references resolve against: only the Services it names."""
    found = {name: index.services[name].resource for name in named if name in index.services}
    return ServiceRefs(found, index.grants, cluster)
