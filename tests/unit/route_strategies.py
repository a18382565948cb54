"""Hypothesis strategies for route sets and requests: Exact and PathPrefix values with trailing
slashes, percent escapes and empty segments, hostnames in any case, wildcards, IPv6 literals
and ports (shared by the route index and reload protection tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane.snapshot import CompiledCors, CompiledRoute

SEGMENTS = st.sampled_from(["", "a", "b", "mcp", "MCP", "a%2Fb", "%2e%2e", "mcpx", "a b", "."])
ROUTE_HOSTS = st.sampled_from(
    [
        "a.example.com",
        "A.Example.COM",
        "*.example.com",
        "*.a.example.com",
        "*.EXAMPLE.com",
        "example.com",
        "*.com",
        "*.",
        "other.org",
        "[::1]",
    ]
)
REQUEST_HOSTS = st.sampled_from(
    [
        "",
        "a.example.com",
        "A.EXAMPLE.COM:8443",
        "b.a.example.com",
        "x.y.a.example.com:80",
        "example.com",
        "example.com.",
        ".example.com",
        "x.com",
        "com",
        "other.org:80",
        "[::1]",
        "[::1]:8080",
        "a.example.com:",
    ]
)
CORS = [
    CompiledCors(False, frozenset({"https://one.example"}), False, "GET", "", False, "", "5"),
    CompiledCors(False, frozenset({"https://two.example"}), True, "GET", "", False, "", "5"),
    CompiledCors(True, frozenset(), False, "GET", "", False, "", "5"),
]
ORIGINS = st.sampled_from(["https://one.example", "https://two.example/", "https://evil.example"])


@st.composite
def paths(draw: st.DrawFn) -> str:
    """A request path or a match value: "/", "", `/a/b`, `/a/b/`, `//a`, `mcp` (no slash)."""
    segments = draw(st.lists(SEGMENTS, max_size=4))
    lead = draw(st.sampled_from(["/", "/", "/", ""]))
    trail = draw(st.sampled_from(["", "", "/"]))
    return lead + "/".join(segments) + trail


@st.composite
def routes(draw: st.DrawFn) -> list[CompiledRoute]:
    """A listener's routes in the order given (the index must honour any order)."""
    found = []
    for i in range(draw(st.integers(0, 12))):
        cors = draw(st.sampled_from([None, None, *CORS]))
        found.append(
            CompiledRoute(
                route=f"default/r{i}",
                rule=0,
                match_type=draw(st.sampled_from(["PathPrefix", "Exact"])),
                match_value=draw(paths()),
                hostnames=tuple(draw(st.lists(ROUTE_HOSTS, max_size=3))),
                cors=cors,
                target=None,
                backend_timeout=1.0,
                policy=None,
            )
        )
    return found
