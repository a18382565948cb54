"""Route tables: which route rule serves a request (host and path), and which protected
resources share a host."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..asgi import ASGIApp
from ..controlplane.snapshot import CompiledCors, CompiledRoute
from .cors import origin_allowed
from .route_index import RouteIndex

# Answers remembered per table, for hosts and paths this short together (a megabyte at most).
MAX_SEEN = 4096
MAX_SEEN_LENGTH = 256


@dataclass(frozen=True, slots=True)
class RouteEntry:
    route: CompiledRoute
    app: ASGIApp


class RouteTable:
    """Entries in precedence order (Exact first, then longest prefix): the first match among
    the routes of the listener the host reaches wins, found through an index built with the
    table, not by walking it. `listeners`: the port's listener hostnames ("" for none)."""

    def __init__(self, entries: Sequence[RouteEntry], listeners: Sequence[str] = ("",)):
        self.entries = tuple(entries)
        self.index = RouteIndex([entry.route for entry in self.entries], listeners)
        # The answers for the hosts and paths requests name, which repeat: one dict lookup
        # instead of the index's walk (bounded: a crowd of paths forgets them all at once).
        self._seen: dict[tuple[str, str], RouteEntry | None] = {}

    def cors_for(self, host: str, origin: str) -> CompiledCors | None:
        """The first CORS policy on this listener (for `host`) that lets `origin` read answers:
        what the gateway's own errors use when no route took the request."""
        for _, cors in self.index.cors_candidates(host):
            if origin_allowed(cors, origin):
                return cors
        return None

    def match(self, host: str, path: str) -> RouteEntry | None:
        """The entry serving `host` + `path`, or None."""
        seen = self._seen
        key = (host, path)
        if key in seen:
            return seen[key]
        position = self.index.first(host, path)
        entry = None if position is None else self.entries[position]
        if len(host) + len(path) <= MAX_SEEN_LENGTH:
            if len(seen) >= MAX_SEEN:
                seen.clear()
            seen[key] = entry
        return entry


def hosts_overlap(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two routes' hostnames can name the same host (no hostnames: any host; a
    wildcard is taken to overlap everything, which errs on the side of "shared")."""
    if not a or not b or any("*" in h for h in (*a, *b)):
        return True
    return not {h.lower() for h in a}.isdisjoint(h.lower() for h in b)


# How many of the other resources on a host the ambiguous root answer names.
SHOWN_OTHERS = 3
# A route with no hostnames, or a wildcard one, may share a host with any route.
_ANY_HOST: frozenset[str] = frozenset()


def shared_hosts(
    listeners: Mapping[int, Iterable[CompiledRoute]],
) -> dict[tuple[str, int], tuple[str, ...]]:
    """For each route rule with a protected resource: the other resources (their MCP paths)
    served on a host it shares, as its answer names them (the first few, then how many more).
    The root well-known forms name one resource per host, so a rule listed here with any must
    not answer them. Routes are grouped by their hostnames, so thousands of resources on one
    host cost one sort, not one comparison per pair."""
    out: dict[tuple[str, int], tuple[str, ...]] = {}
    for routes in listeners.values():
        protected = [r for r in routes if r.policy is not None and r.policy.mcp is not None]
        by_host: dict[str, set[tuple[str, str]]] = {}
        anywhere: set[tuple[str, str]] = set()
        for route in protected:
            key = _host_key(route.hostnames)
            if key is _ANY_HOST:
                anywhere.add(_resource(route))
            for host in key:
                by_host.setdefault(host, set()).add(_resource(route))
        everything = anywhere.union(*by_host.values())
        groups: dict[frozenset[str], _HostGroup] = {}
        for route in protected:
            key = _host_key(route.hostnames)
            group = groups.get(key)
            if group is None:
                near = (
                    everything if key is _ANY_HOST else anywhere.union(*(by_host[h] for h in key))
                )
                group = groups[key] = _HostGroup(near)
            shown = group.others(_resource(route))
            if shown:
                out[(route.route, route.rule)] = shown
    return out


def _host_key(hostnames: Sequence[str]) -> frozenset[str]:
    """The hosts a route serves (lower case), or `_ANY_HOST` when it may serve any."""
    if not hostnames or any("*" in h for h in hostnames):
        return _ANY_HOST
    return frozenset(h.lower() for h in hostnames)


Resource = tuple[str, str]


class _HostGroup:
    """The resources routes with the same hostnames can reach. Only a resource among the first
    few named needs an answer of its own; every other route shares one tuple, so the cost per
    route is a lookup however many resources a host has."""

    def __init__(self, reachable: set[Resource]):
        self.reachable = reachable
        self.in_order = sorted(reachable, key=lambda r: (r[1], r[0]))
        names, walked = self._walk(None)
        self.head = set(self.in_order[:walked])
        self.names = tuple(names)
        self.shared: dict[int, tuple[str, ...]] = {}

    def others(self, mine: Resource) -> tuple[str, ...]:
        """The first SHOWN_OTHERS other resources' paths, then how many more; () if none."""
        count = len(self.reachable) - (1 if mine in self.reachable else 0)
        if count <= 0:
            return ()
        if mine in self.head:
            return _shown(self._walk(mine)[0], count)
        if count not in self.shared:
            self.shared[count] = _shown(list(self.names), count)
        return self.shared[count]

    def _walk(self, mine: Resource | None) -> tuple[list[str], int]:
        """The paths named for `mine`, and how many resources in order were looked at."""
        names: list[str] = []
        walked = 0
        for resource in self.in_order:
            walked += 1
            if resource != mine and resource[1] not in names:
                names.append(resource[1])
                if len(names) == SHOWN_OTHERS:
                    break
        return names, walked


def _shown(names: list[str], count: int) -> tuple[str, ...]:
    return (*names, f"{count - len(names)} more") if count > len(names) else tuple(names)


def _resource(route: CompiledRoute) -> tuple[str, str]:
    assert route.policy is not None
    assert route.policy.mcp is not None
    return route.policy.key, route.policy.mcp.mcp_path
