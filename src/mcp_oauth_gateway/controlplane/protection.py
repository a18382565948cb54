"""Whether a reload would let in, or give more to, a request the running configuration refuses.
A route with no GatewayPolicy is served as it is (Gateway API), and a policy edited in a file
read half-written, or changed in two saves, can lose a rule: a reload is no place to widen
access. The watcher refuses such a change; a restart applies it on purpose.

Every request a listener can get falls in one of finitely many classes: two requests whose host
and path are matched by the same route hostnames and path values are served by the same route,
before and after. One request of each class is tried: each path value of both route tables and
a path under each prefix that no route names; for each, each hostname of the routes that path
reaches, a name under each of their wildcards that no route names, and a host no route names.
Where a GatewayPolicy decides it now, the route that would serve it must have a policy no wider
(`reload_guard.policy_widening`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import is_

from .hostnames import request_name, serving_listener
from .reload_guard import policy_widening
from .snapshot import CompiledPolicy, CompiledRoute, Snapshot

Rows = Sequence[CompiledRoute]

RESTART = "a reload never widens access: fix the files, or restart to apply it on purpose"
# A path segment and a host label no route names (no route value holds a NUL).
FRESH = "\x00"


Candidates = list[tuple[int, CompiledRoute]]


class _Served:
    """A port's routes by Exact path and by prefix, each with its precedence position, and the
    hostnames of its listeners (a request reaches only the routes of one of them)."""

    def __init__(self, routes: Rows, listeners: Sequence[str] = ("",)) -> None:
        self.listeners = frozenset(listeners)
        self.exact: dict[str, Candidates] = {}
        self.prefix: dict[str, Candidates] = {}
        for position, route in enumerate(routes):
            if route.match_type == "Exact":
                self.exact.setdefault(route.match_value, []).append((position, route))
            else:
                key = route.match_value.rstrip("/")
                self.prefix.setdefault(key, []).append((position, route))

    def matching(self, path: str) -> Candidates:
        """The routes whose path matches `path`, whatever their hostnames."""
        segments = path.split("/")
        # Every prefix a whole-segment match allows; "" is the `/` prefix, which takes any path.
        keys = dict.fromkeys(
            ["", *("/".join(segments[:end]) for end in range(1, len(segments) + 1))]
        )
        candidates = list(self.exact.get(path, ()))
        for key in keys:
            candidates += self.prefix.get(key, ())
        return candidates

    def first(self, host: str, path: str) -> CompiledRoute | None:
        """The route that serves `host` + `path`: the lowest position among those matching."""
        return self.serving(self.matching(path), host)

    def serving(self, candidates: Candidates, host: str) -> CompiledRoute | None:
        """Of the routes matching a path, the one serving `host`: only the routes of the
        listener the host goes to (listener isolation), the first of those naming it."""
        name = request_name(host)  # as the data plane reads a Host header
        listener = serving_listener(self.listeners, name)
        matching = [
            (p, r)
            for p, r in candidates
            if r.listener_hostname == listener and _names(r.hostnames, name)
        ]
        return min(matching, key=lambda pr: pr[0])[1] if matching else None


def _names(patterns: Sequence[str], host: str) -> bool:
    """Route hostnames `patterns` take requests for `host` ("" stands for any other name)."""
    if not patterns:
        return True
    if not host:
        return False
    host = host.lower()
    return any(
        p == host or (p.startswith("*.") and host.endswith(p[1:]))
        for p in (pattern.lower() for pattern in patterns)
    )


def paths(routes: Iterable[CompiledRoute]) -> list[str]:
    """One path of each class of paths the routes tell apart: each value, and one under each
    prefix that no route names."""
    found: dict[str, None] = {}
    for route in routes:
        found[route.match_value] = None
        if route.match_type != "Exact":
            found[route.match_value.rstrip("/") + "/" + FRESH] = None
    return list(found)


def hosts(routes: Iterable[CompiledRoute], listeners: Iterable[str] = ()) -> list[str]:
    """One host of each class of hosts the routes and listeners tell apart: each name, one
    under each wildcard that only it and the wildcards above it match, and one that no route
    or listener names."""
    found: dict[str, str] = {"": ""}
    names = [*listeners, *(pattern for route in routes for pattern in route.hostnames)]
    for pattern in names:
        host = FRESH + pattern[1:] if pattern.startswith("*.") else pattern
        found.setdefault(host.lower(), host)
    return list(found.values())


def _where(host: str, path: str) -> str:
    return f"{(host or '*').replace(FRESH, '*')}{path.replace(FRESH, '*')}"


def _unprotected(where: str, now: CompiledRoute, policy: CompiledPolicy) -> str:
    return (
        f"{where} would be served without a token by HTTPRoute {now.route} "
        f"(GatewayPolicy {policy.key} protects it now); {RESTART}"
    )


def _wider(where: str, now: CompiledRoute, old: CompiledPolicy, findings: list[str]) -> str:
    new = now.policy
    assert new is not None
    if old.key == new.key:
        return f"GatewayPolicy {new.key}: {'; '.join(findings)}; {RESTART}"
    return (
        f"{where} would be decided by GatewayPolicy {new.key} (HTTPRoute {now.route}) instead "
        f"of {old.key}, which decides it now, and it is wider: {'; '.join(findings)}; {RESTART}"
    )


def _listener(
    current: Rows, candidate: Rows, listeners: tuple[Sequence[str], Sequence[str]]
) -> list[str]:
    """One port's requests a policy decides now that `candidate` would serve more openly:
    one problem per policy and route taking them over (its first such request named);
    `listeners`: the port's listener hostnames now and after."""
    if all(route.policy is None for route in current):
        return []
    before, after = _Served(current, listeners[0]), _Served(candidate, listeners[1])
    names = [*listeners[0], *listeners[1]]
    judged: set[tuple[int, int]] = set()
    found: dict[tuple[str, str, str | None], str] = {}
    # Many routes share a policy: each pair of policies is compared once.
    compared: dict[tuple[int, int], list[str]] = {}
    for path in tried_paths(current, candidate, listeners):
        # Only the hostnames of the routes this path reaches tell its hosts apart.
        was_rows, now_rows = before.matching(path), after.matching(path)
        for host in hosts((r for _, r in [*was_rows, *now_rows]), names):
            was = before.serving(was_rows, host)
            served = was is not None and was.policy is not None
            now = after.serving(now_rows, host) if served else None
            if was is None or was.policy is None or now is None or (id(was), id(now)) in judged:
                continue  # not decided by a policy now, not served (404), or already judged
            judged.add((id(was), id(now)))
            key = (was.policy.key, now.route, now.policy.key if now.policy else None)
            if key in found:
                continue
            if now.policy is None:
                found[key] = _unprotected(_where(host, path), now, was.policy)
                continue
            policies = (id(was.policy), id(now.policy))
            if policies not in compared:
                compared[policies] = policy_widening(was.policy, now.policy)
            if compared[policies]:
                found[key] = _wider(_where(host, path), now, was.policy, compared[policies])
    return list(found.values())


# Past this many rows changed, every class of request is tried (finding the ones they reach
# would cost more).
FEW_CHANGED = 32


def tried_paths(
    current: Rows, candidate: Rows, listeners: tuple[Sequence[str], Sequence[str]]
) -> list[str]:
    """The paths whose requests may be served otherwise: one of each class, as `paths` gives
    them, less those no changed row matches. A request that only rows of both tables match,
    in the same order, is served by the same row (the same object: the same policy) before
    and after, on the same listeners: it cannot be served more openly."""
    every = paths([*current, *candidate])
    changed = changed_rows(current, candidate)
    if changed is None or len(changed) > FEW_CHANGED or list(listeners[0]) != list(listeners[1]):
        return every
    reached: set[str] = set()
    for row in changed:
        if row.match_type == "Exact":
            reached.add(row.match_value)
            continue
        prefix = row.match_value.rstrip("/")
        if not prefix:
            return every  # `/` takes every path
        under = prefix + "/"
        reached.update(p for p in every if p == prefix or p.startswith(under))
    return [p for p in every if p in reached]


def changed_rows(current: Rows, candidate: Rows) -> list[CompiledRoute] | None:
    """The rows only one of the tables has (by identity: a row compiled again is changed), or
    None when the rows both have are not in the same order."""
    before, after = {id(r) for r in current}, {id(r) for r in candidate}
    kept_before = [r for r in current if id(r) in after]
    kept_after = [r for r in candidate if id(r) in before]
    if len(kept_before) != len(kept_after) or not all(map(is_, kept_before, kept_after)):
        return None
    return [r for r in current if id(r) not in after] + [
        r for r in candidate if id(r) not in before
    ]


def lost_protection(current: Snapshot, candidate: Snapshot) -> list[str]:
    """Why `candidate` would let in, or give more to, a request that `current` refuses."""
    found: list[str] = []
    for port, routes in current.listeners.items():
        hostnames = (current.hosts_of(port), candidate.hosts_of(port))
        found += _listener(routes, candidate.listeners.get(port, ()), hostnames)
    return list(dict.fromkeys(found))
