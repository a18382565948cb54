"""The Gateway API matching rules written the plain way: a linear walk of the listener's routes
in precedence order, the first match winning. What the gateway did before its route index, kept
as the reference the index is tested against."""

from __future__ import annotations

from collections.abc import Sequence

from mcp_oauth_gateway.controlplane.snapshot import CompiledCors, CompiledRoute
from mcp_oauth_gateway.dataplane.cors import origin_allowed


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
    # A fully qualified name's final dot names the same host.
    name = name[:-1] if name.endswith(".") and not host.startswith("[") else name
    for pattern in hostnames:
        pattern = pattern.lower()
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and name != pattern[2:]:
                return True
        elif name == pattern:
            return True
    return False


def first_match(routes: Sequence[CompiledRoute], host: str, path: str) -> int | None:
    """The position of the first route matching `host` + `path`, or None."""
    for position, route in enumerate(routes):
        if path_matches(route.match_type, route.match_value, path) and host_matches(
            route.hostnames, host
        ):
            return position
    return None


def first_cors(routes: Sequence[CompiledRoute], host: str, origin: str) -> CompiledCors | None:
    """The first CORS policy of a route naming `host` that lets `origin` read answers."""
    for route in routes:
        cors = route.cors
        if (
            cors is not None
            and host_matches(route.hostnames, host)
            and origin_allowed(cors, origin)
        ):
            return cors
    return None
