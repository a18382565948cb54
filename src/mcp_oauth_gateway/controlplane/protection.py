"""Whether a reload would answer without a token a request that needs one today. A route with
no GatewayPolicy is served as it is (Gateway API), so a file read half-written, or an edit made
in two saves, can open a protected path for as long as that snapshot serves. A reload is no
place to drop protection: the watcher refuses such a change and a restart applies it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .hostnames import meet, request_name, serving_listener
from .snapshot import CompiledRoute, Snapshot

Rows = Sequence[CompiledRoute]


class _Served:
    """A port's routes by Exact path and by prefix, each with its precedence position, and the
    hostnames of its listeners (a request reaches only the routes of one of them)."""

    def __init__(self, routes: Rows, listeners: Sequence[str] = ("",)) -> None:
        self.listeners = frozenset(listeners)
        self.exact: dict[str, list[tuple[int, CompiledRoute]]] = {}
        self.prefix: dict[str, list[tuple[int, CompiledRoute]]] = {}
        for position, route in enumerate(routes):
            if route.match_type == "Exact":
                self.exact.setdefault(route.match_value, []).append((position, route))
            else:
                key = route.match_value.rstrip("/")
                self.prefix.setdefault(key, []).append((position, route))

    def first(self, host: str, path: str) -> CompiledRoute | None:
        """The route that serves `host` + `path`: the lowest position among those matching."""
        segments = path.split("/")
        # Every prefix a whole-segment match allows; "" is the `/` prefix, which takes any path.
        keys = dict.fromkeys(
            ["", *("/".join(segments[:end]) for end in range(1, len(segments) + 1))]
        )
        candidates = list(self.exact.get(path, ()))
        for key in keys:
            candidates += self.prefix.get(key, ())
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


def _hosts(route: CompiledRoute, later: Rows) -> Iterable[str]:
    """The request hosts to try for a route: its own names and the names of the later routes
    without a policy that it serves too (any of them when it names none). A later name can
    reach another listener, or an earlier route, than the route's own names do."""
    names = dict.fromkeys(h for r in later if r.policy is None for h in r.hostnames)
    if not route.hostnames:
        return ["", *names]
    own = [h.lower() for h in route.hostnames]
    met = (h for h in names if any(meet(p, h.lower()) for p in own))
    return [*route.hostnames, *met]


def _listener(routes: Rows, later: Rows, listeners: Sequence[str] = ("",)) -> list[str]:
    """One port's protected routes that `later` (on `listeners`) would serve without a
    policy."""
    if all(r.policy is not None for r in later):
        return []  # the usual case, and the whole check costs one pass
    served = _Served(later, listeners)
    found: list[str] = []
    for route in routes:
        if route.policy is None:
            continue
        for host in _hosts(route, later):
            open_route = served.first(host, route.match_value)
            if open_route is not None and open_route.policy is None:
                where = f"{host or '*'}{route.match_value}"
                found.append(
                    f"{where} would be served without a token by HTTPRoute {open_route.route} "
                    f"(GatewayPolicy {route.policy.key} protects it now); a reload never "
                    "removes protection: fix the files, or restart the gateway if that is meant"
                )
                break
    return found


def lost_protection(current: Snapshot, candidate: Snapshot) -> list[str]:
    """The paths a token protects now that `candidate` would serve without one."""
    found: list[str] = []
    for port, routes in current.listeners.items():
        found += _listener(routes, candidate.listeners.get(port, ()), candidate.hosts_of(port))
    return list(dict.fromkeys(found))
