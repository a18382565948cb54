"""A listener is a boundary: each port belongs to one Gateway (the oldest, then the first by
namespace/name), a listener of another Gateway on it is not served and says whose the port is,
its routes are not served there, and two listeners of one Gateway with one port and hostname
conflict. The same rule holds from files."""

from __future__ import annotations

import random

import yaml
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.listener_ownership import port_holders, refused_listeners
from mcp_oauth_gateway.controlplane.objects import RefusedGateway, index_objects
from mcp_oauth_gateway.kube import status as kube_status
from mcp_oauth_gateway.kube.cache import ObjectCache
from mcp_oauth_gateway.kube.kinds import BY_KIND, WATCHED
from unit.fuzz_settings import FUZZ
from unit.gateway_support import (
    CLASS,
    build,
    conditions,
    gateway,
    objects,
    route,
    served_routes,
)

ALL = "{namespaces: {from: All}}"
PLATFORM = gateway("platform", "[{name: http, port: 8080}]", "2026-01-01T00:00:00Z")
# The tester's attack: a tenant's Gateway on the platform's port, taking routes from anywhere.
TENANT = gateway(
    "tenant", f"[{{name: http, port: 8080, allowedRoutes: {ALL}}}]", "2026-02-01T00:00:00Z"
)
PLATFORM_ROUTE = route("platform", "[{name: gw}]", "/mcp", name="mcp")
# An Exact match sorts before the platform's PathPrefix: merged, it would take /mcp.
TENANT_ROUTE = route("tenant", "[{name: gw}]", "/mcp", name="grab", match="Exact")


def test_a_gateway_on_a_port_another_holds_is_not_served_and_says_whose_it_is():
    result = build(CLASS + PLATFORM + TENANT + PLATFORM_ROUTE + TENANT_ROUTE)
    assert served_routes(result, 8080) == ["platform/mcp"]
    tenant = result.statuses["Gateway", "tenant", "gw"]
    gateway_conditions = conditions(tenant.conditions)
    assert gateway_conditions["Accepted"][:2] == (False, "ListenersNotValid")
    assert gateway_conditions["Programmed"][:2] == (False, "Invalid")
    assert "port 8080 belongs to Gateway platform/gw" in gateway_conditions["Accepted"][2]
    (listener,) = tenant.listeners
    assert listener.attached_routes == 0
    listener_conditions = conditions(listener.conditions)
    assert listener_conditions["Accepted"][:2] == (False, "PortUnavailable")
    assert listener_conditions["Accepted"][2].startswith("port 8080 belongs to Gateway platform/gw")
    assert listener_conditions["Programmed"][:2] == (False, "Invalid")
    # The tenant's route is told why it is not served.
    (parent,) = result.statuses["HTTPRoute", "tenant", "grab"].parents
    accepted = conditions(parent.conditions)["Accepted"]
    assert accepted[:2] == (False, "NoMatchingParent")
    assert "listener 'http' is not served: port 8080 belongs to Gateway platform/gw" in accepted[2]
    # The platform is untouched.
    platform = result.statuses["Gateway", "platform", "gw"]
    assert conditions(platform.conditions)["Accepted"] == (True, "Accepted", "Gateway accepted")
    assert [lst.attached_routes for lst in platform.listeners] == [1]


def test_the_oldest_gateway_holds_the_port_whatever_its_name_then_namespace_and_name():
    older_tenant = TENANT.replace("2026-02-01", "2025-12-01")
    result = build(CLASS + PLATFORM + older_tenant + PLATFORM_ROUTE + TENANT_ROUTE)
    assert served_routes(result, 8080) == ["tenant/grab"]
    same_time = TENANT.replace("2026-02-01", "2026-01-01")
    result = build(CLASS + PLATFORM + same_time + PLATFORM_ROUTE + TENANT_ROUTE)
    assert served_routes(result, 8080) == ["platform/mcp"]  # platform/gw < tenant/gw
    a_first = TENANT.replace("2026-02-01", "2026-01-01").replace(
        "namespace: tenant", "namespace: a"
    )
    index = index_objects(objects(CLASS + PLATFORM + a_first))
    assert port_holders(index.gateways) == {8080: "a/gw"}


def test_a_listener_on_a_free_port_is_served_while_the_taken_one_is_not():
    listeners = f"[{{name: http, port: 8080, allowedRoutes: {ALL}}}, {{name: own, port: 9090}}]"
    tenant = gateway("tenant", listeners, "2026-02-01T00:00:00Z")
    result = build(CLASS + PLATFORM + tenant + PLATFORM_ROUTE + TENANT_ROUTE)
    assert served_routes(result, 8080) == ["platform/mcp"]
    assert served_routes(result, 9090) == ["tenant/grab"]
    status = result.statuses["Gateway", "tenant", "gw"]
    accepted = conditions(status.conditions)["Accepted"]
    # Gateway API: ListenersNotValid with Accepted=True while other listeners are served.
    assert accepted[:2] == (True, "ListenersNotValid")
    assert "listener 'http': port 8080 belongs to Gateway platform/gw" in accepted[2]
    assert conditions(status.conditions)["Programmed"][0] is True
    served = {lst.name: conditions(lst.conditions)["Accepted"][0] for lst in status.listeners}
    assert served == {"http": False, "own": True}


def test_a_route_naming_the_taken_listener_by_section_or_port_is_not_served_there():
    listeners = f"[{{name: http, port: 8080, allowedRoutes: {ALL}}}, {{name: own, port: 9090}}]"
    tenant = gateway("tenant", listeners, "2026-02-01T00:00:00Z")
    for parents in ("[{name: gw, sectionName: http}]", "[{name: gw, port: 8080}]"):
        text = CLASS + PLATFORM + tenant + PLATFORM_ROUTE
        result = build(text + route("tenant", parents, "/mcp", name="grab", match="Exact"))
        assert served_routes(result, 8080) == ["platform/mcp"], parents
        assert served_routes(result, 9090) == [], parents


def test_listeners_of_one_gateway_with_the_same_port_and_hostname_conflict():
    same = gateway("platform", "[{name: a, port: 8080}, {name: b, port: 8080}]")
    result = build(CLASS + same + PLATFORM_ROUTE)
    # Neither can be told from the other, so neither is served and the port is not bound.
    assert 8080 not in result.snapshot.listeners
    status = result.statuses["Gateway", "platform", "gw"]
    for listener in status.listeners:
        found = conditions(listener.conditions)
        assert found["Conflicted"][:2] == (True, "HostnameConflict")
        assert found["Accepted"][:2] == (False, "HostnameConflict")
        assert found["Programmed"][:2] == (False, "Invalid")
    message = conditions(status.listeners[0].conditions)["Conflicted"][2]
    assert message.startswith("listener 'b' has the same port 8080 and no hostname")
    assert conditions(status.conditions)["Accepted"][:2] == (False, "ListenersNotValid")
    named = gateway(
        "platform",
        "[{name: a, port: 8080, hostname: a.example.com}, "
        "{name: b, port: 8080, hostname: A.example.com}]".replace("A.", "a."),
    )
    assert 8080 not in build(CLASS + named + PLATFORM_ROUTE).snapshot.listeners
    distinct = gateway(
        "platform",
        "[{name: a, port: 8080, hostname: a.example.com}, {name: b, port: 8080}]",
    )
    result = build(CLASS + distinct + PLATFORM_ROUTE)
    assert result.snapshot.listener_hosts[8080] == ("", "a.example.com")
    assert all(
        conditions(lst.conditions)["Accepted"][0]
        for lst in result.statuses["Gateway", "platform", "gw"].listeners
    )


def test_from_files_a_second_gateway_on_a_port_is_a_load_error_naming_the_holder():
    # One pure function serves both modes: the same documents mean the same from files, and a
    # file author merges two Gateways by writing one with both listeners.
    result = build(PLATFORM + TENANT + PLATFORM_ROUTE + TENANT_ROUTE, cluster=False)
    assert served_routes(result, 8080) == ["platform/mcp"]
    assert not result.snapshot.ok
    assert result.snapshot.errors[0] == (
        "Gateway tenant/gw: spec.listeners[0] ('http') is not served: port 8080 belongs to "
        "Gateway platform/gw (the oldest Gateway with a listener on a port holds it, then the "
        "first by namespace/name): use another port, or attach the routes to Gateway "
        "platform/gw where its listeners allow them"
    )


def test_a_gateway_the_models_refuse_still_holds_its_port():
    # The platform's Gateway broken by an edit (a protocol the gateway does not serve): the
    # tenant's newer Gateway must not take the port, nor the platform's callers, meanwhile.
    broken = PLATFORM.replace("port: 8080}", "port: 8080, protocol: UDP}")
    cache = ObjectCache(WATCHED)
    documents = [d for d in yaml.safe_load_all(CLASS + broken + TENANT + TENANT_ROUTE) if d]
    for kind in WATCHED:
        items = [d for d in documents if d["kind"] == kind.kind]
        cache.replace_all(kind, items, "1")
    (stand_in,) = [r for r in cache.resources() if isinstance(r, RefusedGateway)]
    assert (stand_in.key, stand_in.ports) == ("platform/gw", (8080,))
    deployment = Deployment(cluster=Cluster())
    result = build_from_objects(cache.resources(), at="T", deployment=deployment)
    assert 8080 not in result.snapshot.listeners
    (listener,) = result.statuses["Gateway", "tenant", "gw"].listeners
    accepted = conditions(listener.conditions)["Accepted"]
    assert accepted[:2] == (False, "PortUnavailable")
    assert "port 8080 belongs to Gateway platform/gw" in accepted[2]
    # A refused Gateway of a class that is not ours holds nothing.
    theirs = [
        {**d, "spec": {**d["spec"], "gatewayClassName": "other"}} if d is documents[1] else d
        for d in documents
    ]
    cache.replace_all(BY_KIND["Gateway"], [d for d in theirs if d["kind"] == "Gateway"], "2")
    result = build_from_objects(cache.resources(), at="T", deployment=deployment)
    assert served_routes(result, 8080) == ["tenant/grab"]


def test_a_port_the_replica_could_not_bind_keeps_a_refused_listeners_own_reason():
    result = build(CLASS + PLATFORM + TENANT)
    computed = result.statuses["Gateway", "tenant", "gw"]
    raw = {"spec": {"listeners": [{"name": "http", "port": 8080}]}}
    unbound = kube_status.unbound_listeners(raw, {8080: "cannot listen on 0.0.0.0:8080: in use"})
    written = kube_status.gateway_status({}, computed, unbound)
    listener = {c["type"]: c for c in written["listeners"][0]["conditions"]}
    assert listener["Accepted"]["message"].startswith("port 8080 belongs to Gateway platform/gw")
    assert "in use" not in str(written["conditions"])
    # The holder's listener does report the failed bind.
    platform = kube_status.gateway_status({}, result.statuses["Gateway", "platform", "gw"], unbound)
    assert platform["listeners"][0]["conditions"][0]["reason"] == "PortUnavailable"
    assert "in use" in platform["listeners"][0]["conditions"][0]["message"]


GATEWAYS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "platform", "tenant"]),  # namespace
        st.sampled_from(["gw", "x"]),  # name
        st.lists(st.sampled_from([8080, 8081, 8082]), min_size=1, max_size=3, unique=True),
        st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2025-06-01T10:00:00Z"]),
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda g: (g[0], g[1]),
)


@FUZZ
@given(GATEWAYS, st.randoms(use_true_random=False))
def test_every_port_serves_the_routes_of_its_oldest_gateway_only(gateways, rng: random.Random):
    text = CLASS
    for namespace, name, ports, created in gateways:
        listeners = ", ".join(
            f"{{name: l{port}, port: {port}, allowedRoutes: {ALL}}}" for port in ports
        )
        text += gateway(namespace, f"[{listeners}]", created, name)
        text += route(namespace, f"[{{name: {name}}}]", f"/{name}", name=f"r-{name}")
    documents = text.split("\n---\n")
    rng.shuffle(documents)  # the order objects arrive in decides nothing
    result = build("\n---\n".join(documents))
    for port in (8080, 8081, 8082):
        claimants = sorted((c, f"{ns}/{n}") for ns, n, ps, c in gateways if port in ps)
        if not claimants:
            assert port not in result.snapshot.listeners
            continue
        holder = claimants[0][1]
        namespace, name = holder.split("/")
        assert served_routes(result, port) == [f"{namespace}/r-{name}"], (port, holder)
        for _, other in claimants[1:]:
            ns, n = other.split("/")
            refused = refused_listeners(index_objects(objects(text)).gateways)[other]
            assert refused[f"l{port}"].reason == "PortUnavailable"
            status = result.statuses["Gateway", ns, n]
            listener = next(lst for lst in status.listeners if lst.name == f"l{port}")
            assert listener.attached_routes == 0
            assert holder in conditions(listener.conditions)["Accepted"][2]
