"""HTTPRoutes in controller mode against a real Kubernetes API server: a backend in another
namespace is served only once a ReferenceGrant there allows it, and a newer route with the
same match cannot take a path over (tests/kube_example_support.py says how the example is
applied).

Tests in this module share one gateway and run in file order.
"""

from __future__ import annotations

from typing import Any

from kube_example_support import (
    ClusterStack,
    example_cluster,
    own_site,
)
from kube_support import WAIT, backend_object, backend_ref, reference_grant, route_object
from support import wait_until

NS = "k8s-routes"
TOOLS_NS = "k8s-routes-tools"
# Sorts before NS: among equal matches a route named first once won.
EARLIER_NS = "aaa"


cluster = example_cluster(own_site(NS))


def route_conditions(cluster: ClusterStack, namespace: str, name: str) -> dict[str, Any]:
    """The conditions of every parent in an HTTPRoute's status, by type."""
    status = cluster.api.get("HTTPRoute", namespace, name).get("status") or {}
    return {c["type"]: c for p in status.get("parents") or [] for c in p["conditions"]}


def test_a_backend_in_another_namespace_needs_a_reference_grant(cluster: ClusterStack) -> None:
    api = cluster.api
    api.create(backend_object("tools", TOOLS_NS, cluster.backend))
    parent = {"name": "mcp-gateway"}
    api.create(route_object("tools", NS, parent, backend_ref("tools", TOOLS_NS), "/tools"))

    def resolved() -> dict[str, Any]:
        return route_conditions(cluster, NS, "tools")

    wait_until(lambda: "ResolvedRefs" in resolved(), WAIT, "the route's status")
    refs = resolved()["ResolvedRefs"]
    assert (refs["status"], refs["reason"]) == ("False", "RefNotPermitted")
    assert f"ReferenceGrant in namespace {TOOLS_NS}" in refs["message"]
    assert cluster.initialize(path="/tools").status_code == 503
    api.create(reference_grant(TOOLS_NS, routes_from=NS))
    wait_until(lambda: resolved()["ResolvedRefs"]["status"] == "True", WAIT, "ResolvedRefs=True")
    wait_until(
        lambda: cluster.initialize(path="/tools").status_code == 200, WAIT, "the route to serve"
    )
    api.delete("HTTPRoute", NS, "tools")


def test_a_newer_route_with_the_same_match_cannot_take_a_path_over(cluster: ClusterStack) -> None:
    # Gateway API: among equal matches the oldest route wins. `aaa/hijack` sorts before
    # k8s-routes/mcp by name, and with no policy it served /mcp without a token.
    api = cluster.api
    listeners = api.get("Gateway", NS, "mcp-gateway")["spec"]["listeners"]
    opened = [{**listeners[0], "allowedRoutes": {"namespaces": {"from": "All"}}}]
    api.patch("Gateway", NS, "mcp-gateway", {"spec": {"listeners": opened}})
    api.create(backend_object("open", EARLIER_NS, cluster.backend))
    parent = {"name": "mcp-gateway", "namespace": NS}
    route = route_object("hijack", EARLIER_NS, parent, backend_ref("open"), "/mcp")
    # Counted before the route exists: its rebuild may precede a read made after.
    swaps = cluster.status()["controller"]["snapshotSwaps"]
    api.create(route)
    try:

        def bound() -> bool:
            status = api.get("HTTPRoute", EARLIER_NS, "hijack").get("status") or {}
            parents = status.get("parents")
            return bool(parents) and cluster.status()["controller"]["snapshotSwaps"] > swaps

        wait_until(bound, WAIT, "the newer route to be bound and built")
        for _ in range(5):
            assert cluster.initialize(None).status_code == 401

        def accepted() -> str:
            conditions = route_conditions(cluster, EARLIER_NS, "hijack")
            return str(conditions.get("Accepted", {}).get("message", ""))

        wait_until(lambda: "shadowed" in accepted(), WAIT, "the losing route's status")
        assert f"PathPrefix /mcp on port {cluster.gateway_port} is shadowed by HTTPRoute " in (
            accepted()
        )
        assert f"{NS}/mcp" in accepted()
    finally:
        api.delete("HTTPRoute", EARLIER_NS, "hijack")
        api.delete("GatewayBackend", EARLIER_NS, "open")
        api.patch("Gateway", NS, "mcp-gateway", {"spec": {"listeners": listeners}})
