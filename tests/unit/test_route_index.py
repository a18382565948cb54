"""The route index chooses the route the plain first-match walk chooses (route_reference), on
generated route sets and requests: Exact and PathPrefix values with trailing slashes, percent
escapes and empty segments, hostnames in any case, wildcards, IPv6 literals and ports."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane.snapshot import CompiledRoute
from mcp_oauth_gateway.dataplane.route_index import RouteIndex
from mcp_oauth_gateway.dataplane.routing import RouteEntry, RouteTable
from unit.fuzz_settings import FUZZ
from unit.route_reference import first_cors, first_match
from unit.route_strategies import ORIGINS, REQUEST_HOSTS, paths, routes


def table(routes: list[CompiledRoute]) -> RouteTable:
    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("never called")

    return RouteTable([RouteEntry(route, app) for route in routes])


@FUZZ
@given(routes(), REQUEST_HOSTS, st.lists(paths(), min_size=1, max_size=5))
def test_the_index_chooses_the_first_matching_route(routes, host, requests):
    index = RouteIndex(routes)
    for path in requests:
        assert index.first(host, path) == first_match(routes, host, path), (host, path)


@FUZZ
@given(routes(), REQUEST_HOSTS, paths())
def test_the_table_serves_the_entry_of_the_first_matching_route(routes, host, path):
    expected = first_match(routes, host, path)
    entry = table(routes).match(host, path)
    assert (entry.route if entry else None) is (routes[expected] if expected is not None else None)


@FUZZ
@given(routes(), REQUEST_HOSTS, ORIGINS)
def test_the_gateways_own_errors_use_the_first_cors_policy_allowing_the_origin(
    routes, host, origin
):
    assert table(routes).cors_for(host, origin) is first_cors(routes, host, origin)


def prefix(value: str, hostnames: tuple[str, ...] = (), match_type: str = "PathPrefix"):
    return CompiledRoute("default/r", 0, match_type, value, hostnames, None, None, 1.0, None)  # type: ignore[arg-type]


def test_prefixes_match_whole_path_elements():
    index = RouteIndex([prefix("/mcp/"), prefix("/")])
    assert index.first("h", "/mcp") == 0
    assert index.first("h", "/mcp/x") == 0
    assert index.first("h", "/mcpx") == 1
    assert index.first("h", "") == 1


def test_a_late_route_among_thousands_is_found():
    routes = [prefix(f"/r{i}", (f"h{i}.example.com",)) for i in range(5000)]
    routes.append(prefix("/late", ("*.example.com",)))
    index = RouteIndex(routes)
    assert index.first("h4999.example.com", "/r4999/mcp") == 4999
    assert index.first("h4999.example.com", "/late") == 5000
    assert index.first("h4999.example.com", "/r4998") is None
