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


def shared_hosts(
    listeners: Mapping[int, Iterable[CompiledRoute]],
) -> dict[tuple[str, int], tuple[str, ...]]:
    """For each route rule with a protected resource: the other resources (their MCP paths)
    served on a host it shares. The root well-known forms name one resource per host, so a
    rule listed here with any must not answer them."""
    out: dict[tuple[str, int], set[str]] = {}
    for routes in listeners.values():
        protected = [r for r in routes if r.policy is not None and r.policy.mcp is not None]
        for route in protected:
            mine = _resource(route)
            others = out.setdefault((route.route, route.rule), set())
            for other in protected:
                if _resource(other) != mine and hosts_overlap(route.hostnames, other.hostnames):
                    others.add(_resource(other)[1])
    return {key: tuple(sorted(v)) for key, v in out.items() if v}


def _resource(route: CompiledRoute) -> tuple[str, str]:
    assert route.policy is not None
    assert route.policy.mcp is not None
    return route.policy.key, route.policy.mcp.mcp_path
