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
A step none of whose inputs changed (the bindings, backends, resolved rules, the attachment,
the policies' Gateways) gives its last result whole, without asking each object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import replace
from typing import Any

from ..resources.loader import Loaded
from ..resources.models import GatewayBackend, GatewayPolicy, HTTPRoute, ReferenceGrant, Resource
from . import status
from .admission import Admission, admit
from .binding import (
    Attachment,
    BindingContext,
    RouteBinding,
    attach_policies,
    bind_route,
    policy_ancestors,
)
from .cluster import Cluster
from .cluster_secrets import ClusterSecrets
from .deployment import Deployment
from .memo import Memo, Tokens
from .object_facts import Facts, Names, indexed_with_facts
from .objects import Entry, ObjectIndex, ObjectKey, RefusedPolicy
from .policies import PolicyResult, compile_policy
from .routes import (
    MissingBackend,
    Rows,
    RuleKey,
    Targets,
    compile_route,
    listener_rows,
    resolve_rules,
)
from .service_refs import ServiceRefs
from .snapshot import CompiledPolicy, PolicyReport
from .target_credentials import check_target_names
from .targets import BackendTargets, compile_targets

Admitted = tuple[Mapping[str, Any], Mapping[str, Any], Admission]


class BuildCache:
    """What the last build computed, step by step (one per watcher or controller: builds run
    one at a time)."""

    def __init__(self) -> None:
        self.tokens = Tokens()
        self.entries: Memo[int, tuple[ObjectKey, Entry[Any], Facts]] = Memo()
        # This build's facts of each entry (by the entry's id: the entries live as long).
        self._facts: dict[int, Facts] = {}
        self.admitted: Memo[str, Admitted] = Memo()
        self.bindings: Memo[str, RouteBinding] = Memo()
        self.policies: Memo[str, PolicyResult] = Memo()
        self.refused: Memo[str, PolicyResult] = Memo()
        self.checked: Memo[str, PolicyResult] = Memo()
        self.backends: Memo[str, BackendTargets] = Memo()
        self.resolved: Memo[str, tuple[Targets | MissingBackend, ...]] = Memo()
        self.routes: Memo[str, Rows] = Memo()
        # Whole steps, kept when none of their inputs changed.
        self.all_bindings: Memo[str, dict[str, RouteBinding]] = Memo()
        self.all_backends: Memo[str, dict[str, BackendTargets]] = Memo()
        self.all_resolved: Memo[str, dict[RuleKey, Targets | MissingBackend]] = Memo()
        self.attachments: Memo[str, Attachment] = Memo()
        self.all_ancestors: Memo[str, dict[str, tuple[str, ...]]] = Memo()
        self.conditions: Memo[str, tuple[status.Condition, ...]] = Memo()
        self.reports: Memo[str, PolicyReport] = Memo()
        self.statuses: Memo[ObjectKey, status.ObjectStatus] = Memo()

    def end(self, keep: bool) -> None:
        """The build ended: keep what it used, or (it failed) what the one before used."""
        self.tokens.end(keep)
        for memo in self.memos():
            memo.end(keep)
        self._facts = {}

    def memos(self) -> tuple[Memo[Any, Any], ...]:
        """Every step's memo."""
        return tuple(value for value in vars(self).values() if isinstance(value, Memo))

    # --- the objects -------------------------------------------------------------------------

    def entry_of(self, item: Loaded | Resource) -> tuple[ObjectKey, Entry[Any]]:
        """An object's identity and entry, the same entry while it is the same object (and what
        its steps read besides it, as far as it says: `facts_of`)."""
        identity, entry, facts = self.entries.get(id(item), (item,), indexed_with_facts)
        self._facts[id(entry)] = facts
        return identity, entry

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

        routes = index.routes
        return self.all_bindings.whole(
            "bind",
            (token, *routes.values()),
            lambda: {key: self.bindings.get(key, (e, token), bound) for key, e in routes.items()},
            (self.bindings,),
        )

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
            entry = index.policies[key]
            policy = entry.resource
            facts = self._facts[id(entry)]
            secrets, named, outside = facts.secrets, facts.services, facts.outside
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
        backends, services = index.backends.values(), index.services.values()
        # A backend that reads a file reads it at every build: no build is the same as the last.
        fresh = object() if any(self._facts[id(e)].outside for e in backends) else None
        return self.all_backends.whole(
            "backends",
            (grants, token, fresh, *backends, "services:", *services),
            lambda: self._compile_backends(index, sealed, grants, token),
            (self.backends,),
        )

    def _compile_backends(
        self, index: ObjectIndex, sealed: Cluster | None, grants: object, token: object
    ) -> dict[str, BackendTargets]:
        out = {}
        for key, entry in index.backends.items():
            facts = self._facts[id(entry)]
            named, outside = facts.services, facts.outside

            def resolved(
                entry: Entry[GatewayBackend], *_: object, named: Names = named
            ) -> BackendTargets:
                return compile_targets(entry, services_refs(index, named, sealed))

            fresh = object() if outside else None
            services = (index.services.get(name) for name in named)
            inputs = (entry, grants, token, fresh, named, *services)
            out[key] = self.backends.get(key, inputs, resolved)
        return out

    def attach(
        self, index: ObjectIndex, valid: Set[str], bindings: Mapping[str, RouteBinding]
    ) -> Attachment:
        """`binding.attach_policies`, each policy's targets as its facts say; last build's
        attachment while every policy names the same routes and is as valid, every route is
        bound the same, and the same policies are refused."""
        facts = self._facts
        claims = (
            part
            for key, entry in index.policies.items()
            for part in (key, facts[id(entry)].targets, key in valid)
        )
        refused = tuple((r.key, r.targets) for r in index.refused.values())
        return self.attachments.whole(
            "attach",
            (bindings, refused, *claims),
            lambda: attach_policies(
                index.policies, valid, bindings, index.refused, lambda e: facts[id(e)].targets
            ),
            (),
        )

    def ancestors(
        self, attachment: Attachment, bindings: Mapping[str, RouteBinding]
    ) -> dict[str, tuple[str, ...]]:
        """`binding.policy_ancestors`, last build's for the same inputs."""
        return self.all_ancestors.whole(
            "ancestors", (attachment, bindings), lambda: policy_ancestors(attachment, bindings), ()
        )

    def created(self, routes: Mapping[str, Entry[HTTPRoute]]) -> dict[str, str]:
        """Each route's creation timestamp ("" for none)."""
        return {key: self._facts[id(entry)].created for key, entry in routes.items()}

    def check_target_names(
        self,
        results: dict[str, PolicyResult],
        index: ObjectIndex,
        attachment: Attachment,
        resolved: Mapping[RuleKey, Targets | MissingBackend],
    ) -> None:
        """`target_credentials.check_target_names`, each policy it makes invalid the same
        result while the same problems make it so (none to check: no policy lists credentials
        per target)."""
        if not any(self._facts[id(entry)].per_target for entry in index.policies.values()):
            return
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
        return self.all_resolved.whole(
            "resolve",
            (token, backends, *routes.values()),
            lambda: self._resolve(routes, backends, grants, token),
            (self.resolved,),
        )

    def _resolve(
        self,
        routes: Mapping[str, Entry[HTTPRoute]],
        backends: Mapping[str, BackendTargets],
        grants: Mapping[str, Entry[ReferenceGrant]] | None,
        token: object,
    ) -> dict[RuleKey, Targets | MissingBackend]:
        out: dict[RuleKey, Targets | MissingBackend] = {}
        for key, entry in routes.items():
            names = self._facts[id(entry)].backends

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
        bindings: Mapping[str, RouteBinding],
    ) -> dict[str, Rows]:
        """`routes.compile_route` for every route, as `routes.listener_rows` lists it."""
        out = {}
        for key, entry in routes.items():
            rules = (resolved[key, i] for i in range(len(entry.resource.spec.rules)))

            def listed(
                entry: Entry[HTTPRoute],
                binding: RouteBinding,
                policy: CompiledPolicy | None,
                *rules: Targets | MissingBackend,
                key: str = key,
            ) -> Rows:
                return listener_rows(binding, compile_route(key, entry, rules, policy))

            inputs = (entry, bindings[key], governed.get(key), *rules)
            out[key] = self.routes.get(key, inputs, listed)
        return out


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
