"""The dev API server (tools/dev_cluster.py) behaves like the Kubernetes API server it is.

One server for the session (the `apiserver` fixture): CRDs, server-side defaults, the status
subresource, watches across a restart, and optimistic concurrency on a Lease.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from devcluster.apiserver import CRD_API, CRDS, DevApiServer, established

NAMESPACE = "dev-apiserver-test"
GATEWAYS = f"/apis/gateway.networking.k8s.io/v1/namespaces/{NAMESPACE}/gateways"
ROUTES = f"/apis/gateway.networking.k8s.io/v1/namespaces/{NAMESPACE}/httproutes"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"


def unique(prefix: str) -> str:
    # Names never repeat, so a rerun in the same session cannot collide with earlier objects.
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def gateway(name: str, *, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "gatewayClassName": "mcp-oauth-gateway",
            "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}],
        },
    }
    if status is not None:
        body["status"] = status
    return body


def create(server: DevApiServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = server.request("POST", path, body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_server_reports_the_built_version(apiserver: DevApiServer) -> None:
    response = apiserver.request("GET", "/version")
    assert response.status_code == 200
    assert response.json()["gitVersion"] == "v1.36.4"


def test_every_crd_is_established(apiserver: DevApiServer) -> None:
    response = apiserver.request("GET", CRD_API)
    assert response.status_code == 200
    crds = {item["metadata"]["name"]: item for item in response.json()["items"]}
    wanted = {path.name.removesuffix(".yaml") for path in CRDS.glob("*.yaml")}
    assert wanted <= crds.keys()
    assert all(established(crds[name]) for name in wanted)


def test_create_applies_the_crd_defaults_and_records_managed_fields(
    apiserver: DevApiServer,
) -> None:
    gateway_name = unique("gw")
    created = create(apiserver, GATEWAYS, gateway(gateway_name))
    assert created["spec"]["listeners"][0]["allowedRoutes"] == {"namespaces": {"from": "Same"}}
    assert created["metadata"]["managedFields"][0]["operation"] == "Update"
    # Until a controller answers, the status reads as upstream's default: Pending.
    reasons = {c["type"]: c["reason"] for c in created["status"]["conditions"]}
    assert reasons == {"Accepted": "Pending", "Programmed": "Pending"}

    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": unique("route"), "namespace": NAMESPACE},
        "spec": {
            "parentRefs": [{"name": gateway_name}],
            "rules": [{"backendRefs": [{"name": "backend"}]}],
        },
    }
    spec = create(apiserver, ROUTES, route)["spec"]
    parent = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway_name}
    assert spec["parentRefs"] == [parent]
    rule = spec["rules"][0]
    # Upstream's backendRef defaults: an unqualified backendRef is a core Service reference.
    assert rule["backendRefs"] == [{"group": "", "kind": "Service", "name": "backend", "weight": 1}]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]


def test_invalid_objects_are_refused_by_the_schema(apiserver: DevApiServer) -> None:
    body = gateway(unique("gw"))
    body["spec"]["listeners"][0]["port"] = 70000
    response = apiserver.request("POST", GATEWAYS, body)
    assert response.status_code == 422
    assert "spec.listeners[0].port" in response.text


def test_status_is_a_separate_subresource(apiserver: DevApiServer) -> None:
    ignored = {"conditions": [condition("Accepted", "True")]}
    created = create(apiserver, GATEWAYS, gateway(unique("gw"), status=ignored))
    name = created["metadata"]["name"]
    assert created["status"]["conditions"][0]["reason"] == "Pending"
    assert created["metadata"]["generation"] == 1

    created["status"] = {"conditions": [condition("Accepted", "True")]}
    written = apiserver.request("PUT", f"{GATEWAYS}/{name}/status", created)
    assert written.status_code == 200, written.text
    assert written.json()["status"]["conditions"][0]["status"] == "True"
    assert written.json()["metadata"]["generation"] == 1

    # Through the main resource the status is dropped, and the spec alone moves generation.
    updated = written.json()
    updated["status"] = {"conditions": [condition("Accepted", "False")]}
    updated["spec"]["listeners"][0]["port"] = 9090
    response = apiserver.request("PUT", f"{GATEWAYS}/{name}", updated)
    assert response.status_code == 200, response.text
    assert response.json()["status"]["conditions"][0]["status"] == "True"
    assert response.json()["metadata"]["generation"] == 2


def condition(kind: str, status: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": "Accepted" if status == "True" else "Invalid",
        "message": "set by the test",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def test_a_watch_from_a_resource_version_sees_a_later_change(apiserver: DevApiServer) -> None:
    name = unique("gw")
    created = create(apiserver, GATEWAYS, gateway(name))
    with apiserver.watch(GATEWAYS, created["metadata"]["resourceVersion"]) as events:
        relabel(apiserver, name, "first")
        event = next(e for e in events if e["object"]["metadata"]["name"] == name)
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["labels"] == {"step": "first"}


def relabel(server: DevApiServer, name: str, value: str) -> dict[str, Any]:
    response = server.request(
        "PATCH",
        f"{GATEWAYS}/{name}",
        content=b'{"metadata": {"labels": {"step": "%s"}}}' % value.encode(),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200, response.text
    patched: dict[str, Any] = response.json()
    return patched


def test_restart_keeps_the_data_and_new_watches_work(apiserver: DevApiServer) -> None:
    name = unique("gw")
    created = create(apiserver, GATEWAYS, gateway(name))
    port = apiserver.port

    apiserver.restart()

    assert apiserver.port == port
    kept = apiserver.request("GET", f"{GATEWAYS}/{name}")
    assert kept.status_code == 200
    assert kept.json()["metadata"]["uid"] == created["metadata"]["uid"]
    # Resumed as a client resumes after a restart: watched from a list's version (the object's
    # own may predate the restarted server's watch cache, which answers 410 Gone for it).
    listed = apiserver.request("GET", GATEWAYS).json()
    assert name in {item["metadata"]["name"] for item in listed["items"]}
    with apiserver.watch(GATEWAYS, listed["metadata"]["resourceVersion"]) as events:
        relabel(apiserver, name, "after-restart")
        event = next(e for e in events if e["object"]["metadata"]["name"] == name)
    assert event["object"]["metadata"]["labels"] == {"step": "after-restart"}


def test_a_lease_update_with_a_stale_resource_version_conflicts(apiserver: DevApiServer) -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": unique("leader"), "namespace": NAMESPACE},
        "spec": {
            "holderIdentity": "replica-a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-23T10:00:00.000000Z",
            "renewTime": "2026-11-23T10:00:00.000000Z",
            "leaseTransitions": 0,
        },
    }
    created = create(apiserver, LEASES, lease)
    path = f"{LEASES}/{lease['metadata']['name']}"

    renewed = {**created, "spec": {**created["spec"], "renewTime": "2026-11-23T10:00:05.000000Z"}}
    first = apiserver.request("PUT", path, renewed)
    assert first.status_code == 200, first.text
    assert first.json()["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]

    # A second replica still holding the first version tries to take over: refused.
    taken = {**created, "spec": {**created["spec"], "holderIdentity": "replica-b"}}
    stale = apiserver.request("PUT", path, taken)
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict"
    holder = apiserver.request("GET", path).json()["spec"]["holderIdentity"]
    assert holder == "replica-a"


@pytest.mark.parametrize("plural", ["gatewayclasses", "referencegrants"])
def test_the_other_gateway_api_kinds_are_served(apiserver: DevApiServer, plural: str) -> None:
    version = "v1beta1" if plural == "referencegrants" else "v1"
    response = apiserver.request("GET", f"/apis/gateway.networking.k8s.io/{version}/{plural}")
    assert response.status_code == 200
    assert response.json()["kind"].endswith("List")
