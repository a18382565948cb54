"""Route tables: which route rule serves a request (host and path), decided by pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..asgi import ASGIApp
from ..controlplane.snapshot import CompiledCors, CompiledRoute
from .cors import origin_allowed


def path_matches(match_type: str, value: str, path: str) -> bool:
    """Gateway API path matching; PathPrefix matches whole segments (`/mcp` not `/mcpx`)."""
    if match_type == "Exact":
        return path == value
    prefix = value.rstrip("/")
    if not prefix:
        return True
    return path == prefix or path.startswith(prefix + "/")


def host_matches(hostnames: Sequence[str], host: str) -> bool:
    """Route hostnames: exact names and `*.example.com` wildcards; none means any host."""
    if not hostnames:
        return True
    name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
    for pattern in hostnames:
        pattern = pattern.lower()
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and name != pattern[2:]:
                return True
        elif name == pattern:
            return True
    return False


@dataclass(frozen=True, slots=True)
class RouteEntry:
    route: CompiledRoute
    app: ASGIApp


class RouteTable:
    """Entries in precedence order (Exact first, then longest prefix); the first match wins."""

    def __init__(self, entries: Sequence[RouteEntry]):
        self.entries = tuple(entries)

    def cors_for(self, host: str, origin: str) -> CompiledCors | None:
        """The first CORS policy on this listener (for `host`) that lets `origin` read answers:
        what the gateway's own errors use when no route took the request."""
        for entry in self.entries:
            cors = entry.route.cors
            if (
                cors is not None
                and host_matches(entry.route.hostnames, host)
                and origin_allowed(cors, origin)
            ):
                return cors
        return None

    def match(self, host: str, path: str) -> RouteEntry | None:
        """The entry serving `host` + `path`, or None."""
        for entry in self.entries:
            route = entry.route
            if path_matches(route.match_type, route.match_value, path) and host_matches(
                route.hostnames, host
            ):
                return entry
        return None


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
