"""Listener hostnames are a boundary: a route is served only for its hostnames within its
listener's (Gateway API, wildcards included), a route with none within it is not accepted
(`NoMatchingListenerHostname`), and a request reaches only the routes of the most specific
listener its host matches (listener isolation), in the data plane as in the reload check."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane.hostnames import ANY_HOST, effective_hostnames, meet
from mcp_oauth_gateway.controlplane.protection import lost_protection
from mcp_oauth_gateway.controlplane.snapshot import CompiledPolicy, CompiledRoute, Snapshot
from mcp_oauth_gateway.dataplane.routing import RouteEntry, RouteTable
from mcp_oauth_gateway.resources import load_paths
from unit.fuzz_settings import FUZZ
from unit.gateway_support import CLASS, build, conditions, gateway, route, served_routes
from unit.route_reference import first_match, host_matches
from unit.route_strategies import paths

ALL = "{namespaces: {from: All}}"


@pytest.mark.parametrize(
    ("listener", "route_hostnames", "effective"),
    [
        (None, [], ()),
        (None, ["a.example.com"], ("a.example.com",)),
        ("*.example.com", [], ("*.example.com",)),
        ("*.example.com", ["a.example.com", "b.other.org"], ("a.example.com",)),
        ("a.example.com", ["*.example.com"], ("a.example.com",)),
        ("*.example.com", ["*.a.example.com"], ("*.a.example.com",)),
        ("*.a.example.com", ["*.example.com"], ("*.a.example.com",)),
        ("*.example.com", ["*.example.com"], ("*.example.com",)),
        ("example.com", ["*.example.com"], None),
        ("*.example.com", ["example.com"], None),
        ("a.example.com", ["b.example.com"], None),
        ("*.example.com", ["*.example.org"], None),
    ],
)
def test_a_routes_hostnames_are_cut_down_to_those_within_its_listeners(
    listener, route_hostnames, effective
):
    assert effective_hostnames(listener, route_hostnames) == effective


LISTENER_NAMES = st.sampled_from(
    ["a.example.com", "*.example.com", "*.a.example.com", "example.com", "*.com", "other.org"]
)
HOSTS = st.sampled_from(
    [
        "a.example.com",
        "b.a.example.com",
        "x.y.a.example.com",
        "example.com",
        "b.example.com",
        "x.com",
        "other.org",
        "z.other.org",
    ]
)


@FUZZ
@given(st.none() | LISTENER_NAMES, st.lists(LISTENER_NAMES, max_size=3), HOSTS)
def test_a_host_is_served_through_a_listener_exactly_when_both_name_it(listener, names, host):
    effective = effective_hostnames(listener, names)
    both = (listener is None or host_matches([listener], host)) and host_matches(names, host)
    served = effective is not None and host_matches(effective, host)
    assert served == both, (listener, names, host, effective)
    if effective is not None and listener is not None:
        assert all(meet(listener, h) == h for h in effective)


# --- the builder: effective hostnames per binding ---------------------------------------------

PLATFORM = gateway(
    "platform",
    "[{name: api, port: 8080, hostname: api.example.com}, "
    f"{{name: tenants, port: 8080, hostname: '*.tenants.example.com', allowedRoutes: {ALL}}}]",
)


def test_a_route_through_a_listener_with_a_hostname_serves_only_names_within_it():
    text = CLASS + PLATFORM
    text += route("t1", "[{name: gw, namespace: platform, sectionName: tenants}]", name="open")
    text += route(
        "t2",
        "[{name: gw, namespace: platform, sectionName: tenants}]",
        name="named",
        hostnames="[api.example.com, x.tenants.example.com]",
    )
    result = build(text)
    tables = {(r.route, r.listener_hostname): r.hostnames for r in result.snapshot.listeners[8080]}
    assert tables == {
        ("t1/open", "*.tenants.example.com"): ("*.tenants.example.com",),
        # api.example.com is the platform's listener's name: never the tenant's.
        ("t2/named", "*.tenants.example.com"): ("x.tenants.example.com",),
    }
    assert result.snapshot.listener_hosts[8080] == ("*.tenants.example.com", "api.example.com")


def test_a_route_with_no_hostname_within_its_listeners_is_not_accepted():
    text = CLASS + PLATFORM
    text += route(
        "t1",
        "[{name: gw, namespace: platform, sectionName: tenants}]",
        hostnames="[api.example.com]",
    )
    result = build(text)
    assert served_routes(result, 8080) == []
    (parent,) = result.statuses["HTTPRoute", "t1", "r"].parents
    accepted = conditions(parent.conditions)["Accepted"]
    assert accepted[:2] == (False, "NoMatchingListenerHostname")
    assert "listener 'tenants' takes hostname *.tenants.example.com only" in accepted[2]
    assert "api.example.com" in accepted[2]
    listeners = result.statuses["Gateway", "platform", "gw"].listeners
    assert [lst.attached_routes for lst in listeners] == [0, 0]


def test_a_listener_refusing_by_namespace_and_one_by_hostname_give_not_allowed():
    text = CLASS + PLATFORM
    text += route("t1", "[{name: gw, namespace: platform}]", hostnames="[api.example.com]")
    (parent,) = build(text).statuses["HTTPRoute", "t1", "r"].parents
    accepted = conditions(parent.conditions)["Accepted"]
    assert accepted[:2] == (False, "NotAllowedByListeners")
    assert "listener 'api' takes routes from namespace platform only" in accepted[2]


def test_hostnames_must_be_lowercase_dns_names_as_gateway_api_says(tmp_path):
    for bad in ("API.example.com", "*", "a.*.example.com", "127.0.0.1", "*.*.example.com"):
        path = tmp_path / "gw.yaml"
        path.write_text(gateway("default", f"[{{name: http, port: 8080, hostname: '{bad}'}}]"))
        loaded = load_paths([path])
        assert any("spec.listeners[0].hostname" in e for e in loaded.errors), (bad, loaded)


# --- listener isolation: the data plane ------------------------------------------------------


async def _never(scope: object, receive: object, send: object) -> None:
    raise AssertionError("never called")


def table(routes: list[CompiledRoute], listeners: tuple[str, ...]) -> RouteTable:
    return RouteTable([RouteEntry(r, _never) for r in routes], listeners)


def compiled(
    name: str, value: str, listener: str, hostnames: tuple[str, ...] = (), exact: bool = False
) -> CompiledRoute:
    return CompiledRoute(
        name,
        0,
        "Exact" if exact else "PathPrefix",
        value,
        hostnames,
        None,
        None,
        1.0,
        None,
        listener_hostname=listener,
    )


def test_a_request_reaches_only_the_routes_of_the_most_specific_listener():
    # The tester's variant: a tenant's Exact /mcp on the wildcard listener sorts before the
    # platform's PathPrefix /mcp; merged by hostnames alone it would take api.example.com/mcp.
    grab = compiled("t/grab", "/mcp", "*.example.com", ("*.example.com",), exact=True)
    platform = compiled("p/mcp", "/mcp", "api.example.com", ("api.example.com",))
    routes = table([grab, platform], ("*.example.com", "api.example.com"))
    for host, served in (
        ("api.example.com:8080", "p/mcp"),
        ("API.EXAMPLE.COM", "p/mcp"),
        ("t1.example.com", "t/grab"),
    ):
        entry = routes.match(host, "/mcp")
        assert entry is not None, host
        assert entry.route.route == served, host
    # A host no listener names reaches none: no route, not the first one.
    assert routes.match("other.org", "/mcp") is None
    # A listener without routes still takes its host: nothing serves it.
    empty = table([grab], ("*.example.com", "api.example.com"))
    assert empty.match("api.example.com", "/mcp") is None
    # A listener without a hostname takes every host no other listener names.
    fallback = compiled("p/any", "/", ANY_HOST)
    both = table([grab, fallback], ("*.example.com", ANY_HOST))
    assert both.match("other.org", "/mcp").route.route == "p/any"
    assert both.match("x.example.com", "/x") is None

    # A fully qualified name (final dot) is the same name: it reaches the platform's listener,
    # not the catch-all one a tenant's route is on.
    catch_all = compiled("t/any", "/mcp", ANY_HOST, exact=True)
    named = table([catch_all, platform], ("api.example.com", ANY_HOST))
    for host in ("api.example.com.", "API.example.com.:8080"):
        entry = named.match(host, "/mcp")
        assert entry is not None, host
        assert entry.route.route == "p/mcp", host
    assert named.match("other.org.", "/mcp").route.route == "t/any"


def specificity(listener: str, host: str) -> tuple[int, int] | None:
    """How specifically a listener hostname names `host` (None: it does not), written plainly."""
    name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
    # A fully qualified name's final dot names the same host.
    name = name[:-1] if name.endswith(".") and not host.startswith("[") else name
    if listener == ANY_HOST:
        return (0, 0)
    if listener == name:
        return (2, len(listener))
    if listener.startswith("*.") and host_matches([listener], host):
        return (1, len(listener))
    return None


def reference(routes: list[CompiledRoute], listeners: list[str], host: str, path: str):
    """The listener with the most specific name for the host, then the first match among its
    routes, as a linear walk."""
    ranked = [(s, lst) for lst in listeners if (s := specificity(lst, host)) is not None]
    if not ranked:
        return None
    chosen = max(ranked)[1]
    mine = [(i, r) for i, r in enumerate(routes) if r.listener_hostname == chosen]
    found = first_match([r for _, r in mine], host, path)
    return None if found is None else mine[found][0]


PORT_LISTENERS = st.lists(
    st.sampled_from(["", "a.example.com", "*.example.com", "*.a.example.com", "other.org"]),
    min_size=1,
    max_size=4,
    unique=True,
)
REQUEST_HOSTS = st.sampled_from(
    ["", "a.example.com", "A.Example.com:8443", "b.a.example.com", "example.com", "other.org"]
)


@st.composite
def port_routes(draw: st.DrawFn) -> tuple[list[str], list[CompiledRoute]]:
    listeners = draw(PORT_LISTENERS)
    found = []
    for i in range(draw(st.integers(0, 8))):
        listener = draw(st.sampled_from(listeners))
        names = draw(st.lists(LISTENER_NAMES, max_size=2))
        effective = effective_hostnames(listener or None, names)
        match_type = draw(st.booleans())
        found.append(compiled(f"ns/r{i}", draw(paths()), listener, effective or (), match_type))
    return listeners, found


@FUZZ
@given(port_routes(), REQUEST_HOSTS, paths())
def test_the_index_serves_the_first_match_of_the_chosen_listener(port, host, path):
    listeners, routes = port
    expected = reference(routes, listeners, host, path)
    entry = table(routes, tuple(listeners)).match(host, path)
    assert (entry.route if entry else None) is (routes[expected] if expected is not None else None)


# --- listener isolation: the reload check ------------------------------------------------------


def snapshot_of(routes: list[CompiledRoute], listeners: tuple[str, ...]) -> Snapshot:
    empty = MappingProxyType({})
    return Snapshot(
        MappingProxyType({8080: tuple(routes)}),
        (),
        (),
        empty,
        empty,
        listener_hosts=MappingProxyType({8080: listeners}),
    )


def test_the_reload_check_follows_the_request_to_its_listener():
    policy = CompiledPolicy("p/auth", (), None, None, False)
    protected = replace(
        compiled("p/mcp", "/mcp", "*.example.com", ("*.example.com",)), policy=policy
    )
    before = snapshot_of([protected], ("*.example.com",))
    # A new, narrower listener takes a.example.com, and an open route there serves /mcp.
    opened = compiled("t/open", "/mcp", "a.example.com", ("a.example.com",))
    after = snapshot_of([protected, opened], ("*.example.com", "a.example.com"))
    (problem,) = lost_protection(before, after)
    assert problem.startswith("a.example.com/mcp would be served without a token by HTTPRoute")
    # The same listener without a route answers nothing there: no loss.
    quiet = snapshot_of([protected], ("*.example.com", "a.example.com"))
    assert lost_protection(before, quiet) == []
