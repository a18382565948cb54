"""Route tables: which route rule serves a request (host and path), decided by pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..asgi import ASGIApp
from ..controlplane.snapshot import CompiledRoute


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

    def match(self, host: str, path: str) -> RouteEntry | None:
        """The entry serving `host` + `path`, or None."""
        for entry in self.entries:
            route = entry.route
            if path_matches(route.match_type, route.match_value, path) and host_matches(
                route.hostnames, host
            ):
                return entry
        return None
