"""The spec's example (examples/kubernetes) served in controller mode against a real Kubernetes
API server, as shipped (its GatewayClass and controller name): the status it comes up with, a
real MCP client signing in through it, and the API calls the replica made
(tests/kube_example_support.py says how the example is applied).

Tests in this module share one gateway and run in file order: the calls are compared last.
"""

from __future__ import annotations

import httpx

from kube_example_support import (
    CLIENT_ID,
    ClusterStack,
    Site,
    example_cluster,
)
from kube_support import WAIT
from node_clients import run_ts_client
from support import deploy_rbac_rules, wait_until

NS = "mcp-e2e"


cluster = example_cluster(Site(NS))


def test_status_comes_up_true_with_the_observed_generation(cluster: ClusterStack) -> None:
    api = cluster.api
    policy = api.get("GatewayPolicy", NS, "mcp-authn")
    generation = policy["metadata"]["generation"]
    every = {"Accepted": "True", "Attached": "True", "ResolvedRefs": "True"}
    conditions = api.wait_conditions("GatewayPolicy", NS, "mcp-authn", every, generation)
    assert conditions["Accepted"]["reason"] == "Valid"
    status = api.get("GatewayPolicy", NS, "mcp-authn")["status"]
    (ancestor,) = status["ancestors"]
    assert ancestor["ancestorRef"] == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": NS,
        "name": "mcp-gateway",
    }
    assert ancestor["controllerName"] == "mcp-oauth-gateway.dev/gateway-controller"
    assert {c["type"]: c["status"] for c in ancestor["conditions"]} == every

    api.wait_conditions("GatewayClass", None, "mcp-oauth-gateway", {"Accepted": "True"}, 1)
    gateway = api.wait_conditions(
        "Gateway", NS, "mcp-gateway", {"Accepted": "True", "Programmed": "True"}, 1
    )
    assert gateway["Programmed"]["observedGeneration"] == 1
    (listener,) = api.get("Gateway", NS, "mcp-gateway")["status"]["listeners"]
    assert listener["name"] == "http"
    assert listener["attachedRoutes"] == 1
    assert {c["type"]: c["status"] for c in listener["conditions"]}["Programmed"] == "True"
    (parent,) = api.get("HTTPRoute", NS, "mcp")["status"]["parents"]
    assert parent["controllerName"] == "mcp-oauth-gateway.dev/gateway-controller"
    assert parent["parentRef"]["name"] == "mcp-gateway"
    assert {c["type"]: c["status"] for c in parent["conditions"]} == {
        "Accepted": "True",
        "ResolvedRefs": "True",
    }
    api.wait_conditions("GatewayBackend", NS, "mcp-backend", {"Accepted": "True"}, 1)
    ready = httpx.get(f"{cluster.admin}/readyz", timeout=5)
    assert ready.status_code == 200, ready.text


def test_status_is_written_only_when_it_changes(cluster: ClusterStack) -> None:
    before = cluster.api.get("GatewayPolicy", NS, "mcp-authn")
    writes = cluster.status()["controller"]["statusWrites"]
    # Counted before the change: its rebuild comes 0.1 s after it arrives, which a count read
    # after the patch on a loaded machine could already include (then no rebuild is "next").
    swaps = cluster.status()["controller"]["snapshotSwaps"]
    # An unrelated change (a label: generation unchanged) rebuilds nothing worth writing.
    cluster.api.patch("GatewayBackend", NS, "mcp-backend", {"metadata": {"labels": {"a": "b"}}})
    wait_until(lambda: cluster.status()["controller"]["snapshotSwaps"] > swaps, WAIT, "a rebuild")
    after = cluster.api.get("GatewayPolicy", NS, "mcp-authn")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert cluster.status()["controller"]["statusWrites"] == writes


def test_a_real_mcp_client_signs_in_through_controller_mode(cluster: ClusterStack) -> None:
    report = run_ts_client(f"{cluster.gateway}/mcp", "alice")
    assert report["ok"], report
    assert report["clientId"] == CLIENT_ID
    assert report["authorizationUrl"].startswith(f"{cluster.idp}/application/o/mcp/authorize/")


def test_the_calls_a_replica_made_are_exactly_what_the_install_grants(
    cluster: ClusterStack,
) -> None:
    def calls() -> set[tuple[str, str, str]]:
        return {
            (c["verb"], c["apiGroup"], c["resource"])
            for c in cluster.status()["controller"]["apiCalls"]
        }

    # The Lease is renewed a few seconds after it is taken: this module can get here first.
    renewal = ("update", "coordination.k8s.io", "leases")
    wait_until(lambda: renewal in calls(), WAIT, "the replica's first Lease renewal")
    # Every rule was used (kube-apiserver serves Services and Namespaces too), and nothing
    # beyond the rules was asked for.
    assert calls() == deploy_rbac_rules()
