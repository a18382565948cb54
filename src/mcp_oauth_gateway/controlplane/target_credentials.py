"""Credentials per target (`spec.backend.credentials.targets`) against the backends of the routes
a policy governs: a listed name must be a target of each such backend, or the policy is invalid
(its routes answer 503): a typo must never leave a target with the default credential. (On a
backend with a single target, `routes.for_rule` puts the entry naming it in place of the default
at load, so the reverse proxy does what it always did.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..resources.models import GatewayPolicy, HTTPRoute
from .binding import Attachment
from .objects import Entry
from .policies import PolicyResult
from .routes import MissingBackend, RuleKey, Targets

PATH = "spec.backend.credentials.targets"


def unknown_targets(
    policy: GatewayPolicy,
    route_key: str,
    route: HTTPRoute,
    resolved: Mapping[RuleKey, Targets | MissingBackend],
) -> list[str]:
    """A problem for each listed name the backend of one of the route's rules has no target
    of, naming the field, the backend and the names it has."""
    credentials = policy.spec.backend.credentials if policy.spec.backend else None
    if credentials is None:
        return []
    problems = []
    for rule_index, rule in enumerate(route.spec.rules):
        targets = resolved.get((route_key, rule_index))
        if targets is None or isinstance(targets, MissingBackend):
            continue  # the rule answers 503 for its missing backend already
        names = [t.name for t in targets]
        ref = rule.backend_refs[0]
        backend = f"{ref.namespace or route.metadata.namespace}/{ref.name}"
        for index, entry in enumerate(credentials.targets or []):
            if entry.name not in names:
                problems.append(
                    f"{PATH}[{index}].name: {entry.name!r} is not a target of GatewayBackend "
                    f"{backend} (the backend of HTTPRoute {route_key} rule {rule_index}), "
                    f"whose targets are {', '.join(names)}; name one of them"
                )
    return problems


def check_target_names(
    results: dict[str, PolicyResult],
    policies: Mapping[str, Entry[GatewayPolicy]],
    attachment: Attachment,
    routes: Mapping[str, Entry[HTTPRoute]],
    resolved: Mapping[RuleKey, Targets | MissingBackend],
) -> None:
    """Make each policy invalid (in `results`) whose credentials name a target one of its
    routes' backends does not have."""
    found: dict[str, list[str]] = {}
    for route_key in sorted(attachment.governing):
        key = attachment.governing[route_key]
        if key not in policies or route_key not in routes:
            continue  # refused by the models: invalid already
        problems = unknown_targets(
            policies[key].resource, route_key, routes[route_key].resource, resolved
        )
        if problems:
            found.setdefault(key, []).extend(problems)
    for key, problems in found.items():
        result = results[key]
        every = (*result.problems, *dict.fromkeys(problems))
        why = f"GatewayPolicy {key} is invalid: " + "; ".join(every)
        results[key] = replace(
            result, compiled=replace(result.compiled, invalid=why), problems=every
        )
