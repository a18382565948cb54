"""Helpers the controller-mode e2e modules share: the test's own calls to the API server and
the command line of a gateway in controller mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from devcluster.cluster import DevCluster
from support import ROOT, Process, free_port, wait_until

GROUPS = {
    "GatewayClass": ("gateway.networking.k8s.io/v1", "gatewayclasses"),
    "Gateway": ("gateway.networking.k8s.io/v1", "gateways"),
    "HTTPRoute": ("gateway.networking.k8s.io/v1", "httproutes"),
    "ReferenceGrant": ("gateway.networking.k8s.io/v1beta1", "referencegrants"),
    "GatewayBackend": ("mcp-oauth-gateway.dev/v1alpha1", "gatewaybackends"),
    "GatewayPolicy": ("mcp-oauth-gateway.dev/v1alpha1", "gatewaypolicies"),
    "Lease": ("coordination.k8s.io/v1", "leases"),
}
ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "k8s-e2e", "version": "1"},
    },
}
WAIT = 60.0


class Api:
    """The test's own calls to the API server (the gateway uses kubernetes_asyncio)."""

    def __init__(self, server: Any):
        self.server = server

    @staticmethod
    def path(kind: str, namespace: str | None, name: str | None = None, sub: str = "") -> str:
        api_version, plural = GROUPS[kind]
        where = f"/namespaces/{namespace}" if namespace else ""
        path = f"/apis/{api_version}{where}/{plural}"
        return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        response = self.server.request(
            "POST", self.path(doc["kind"], doc["metadata"].get("namespace")), doc
        )
        assert response.status_code == 201, response.text
        return response.json()

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        response = self.server.request("GET", self.path(kind, namespace, name))
        assert response.status_code == 200, response.text
        return response.json()

    def patch(self, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> int:
        """A JSON merge patch; the object's new generation."""
        response = self.server.request(
            "PATCH",
            self.path(kind, namespace, name),
            patch,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
        return int(response.json()["metadata"]["generation"])

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        response = self.server.request("DELETE", self.path(kind, namespace, name))
        assert response.status_code in (200, 202, 404), response.text

    def conditions(self, kind: str, namespace: str | None, name: str) -> dict[str, dict[str, Any]]:
        """The object's own `status.conditions`, by type."""
        status = self.get(kind, namespace, name).get("status") or {}
        return {c["type"]: c for c in status.get("conditions") or []}

    def wait_conditions(
        self, kind: str, namespace: str | None, name: str, want: dict[str, str], generation: int
    ) -> dict[str, dict[str, Any]]:
        """Until the object's conditions have the wanted statuses for `generation`."""
        seen: dict[str, dict[str, Any]] = {}

        def ready() -> bool:
            nonlocal seen
            seen = self.conditions(kind, namespace, name)
            return all(
                t in seen and seen[t]["status"] == s and seen[t]["observedGeneration"] == generation
                for t, s in want.items()
            )

        try:
            wait_until(ready, WAIT, f"{kind} {name} conditions {want} at generation {generation}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {seen}") from None
        return seen


# The objects tests create, as small builders.
BACKEND_GROUP = "mcp-oauth-gateway.dev"


def gateway_class(name: str, controller: str) -> dict[str, Any]:
    """A GatewayClass naming `controller`."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
    }


def listener(port: int, **extra: Any) -> dict[str, Any]:
    """A Gateway's HTTP listener `http` on `port` (`extra`: hostname, allowedRoutes...)."""
    return {"name": "http", "port": port, "protocol": "HTTP", **extra}


def gateway_object(
    name: str, namespace: str, class_name: str, listeners: list[dict[str, Any]]
) -> dict[str, Any]:
    """A Gateway of class `class_name`."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gatewayClassName": class_name, "listeners": listeners},
    }


def backend_object(name: str, namespace: str, backend: str) -> dict[str, Any]:
    """A GatewayBackend with one static target: the MCP server at `backend` (`host:port`)."""
    host, port = backend.rsplit(":", 1)
    target = {"name": "t", "static": {"host": host, "port": int(port)}}
    return {
        "apiVersion": f"{BACKEND_GROUP}/v1alpha1",
        "kind": "GatewayBackend",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"mcp": {"targets": [target]}},
    }


def backend_ref(name: str, namespace: str | None = None) -> dict[str, str]:
    """A route's reference to a GatewayBackend (in the route's namespace unless named)."""
    ref = {"group": BACKEND_GROUP, "kind": "GatewayBackend", "name": name}
    return {**ref, "namespace": namespace} if namespace else ref


def route_object(
    name: str,
    namespace: str,
    parent: dict[str, str],
    backend: dict[str, str],
    path_prefix: str | None = None,
) -> dict[str, Any]:
    """An HTTPRoute with one rule: `parent` its Gateway, `backend` its only backendRef."""
    rule: dict[str, Any] = {"backendRefs": [backend]}
    if path_prefix is not None:
        rule = {"matches": [{"path": {"type": "PathPrefix", "value": path_prefix}}], **rule}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parentRefs": [parent], "rules": [rule]},
    }


def reference_grant(namespace: str, routes_from: str) -> dict[str, Any]:
    """Lets the HTTPRoutes of `routes_from` name the GatewayBackends of `namespace`."""
    routes = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": routes_from}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "routes-from-mcp", "namespace": namespace},
        "spec": {"from": [routes], "to": [{"group": BACKEND_GROUP, "kind": "GatewayBackend"}]},
    }


# Every peer of the tests listens on loopback, which an operator allows tenants to name only by
# saying so (`--allow-hosts` with a loopback network), as on a laptop.
LOOPBACK_HOSTS = ("127.0.0.0/8",)


def controller_cmd(
    kubeconfig: Path, admin_port: int, *extra: str, allow_hosts: tuple[str, ...] = LOOPBACK_HOSTS
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mcp_oauth_gateway",
        "serve",
        "--kubeconfig",
        str(kubeconfig),
        "--admin-port",
        str(admin_port),
        *(f"--allow-hosts={entry}" for entry in allow_hosts),
        *extra,
    ]


def kustomize_render(directory: Path = ROOT / "deploy") -> list[dict[str, Any]]:
    """`directory` rendered by a real kustomize: the one kubectl v1.36 carries (`kubectl
    kustomize`, what `kubectl apply -k` runs), built by tools/dev_cluster.py."""
    done = subprocess.run(
        [str(DevCluster.cached_binary("kubectl")), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def service_account_kubeconfig(cluster: Any, namespace: str, name: str, path: Path) -> Path:
    """What a person does to act as a ServiceAccount on a `DevCluster`: a token from the
    TokenRequest API."""
    token = cluster.kubectl(
        "create", "token", name, "--namespace", namespace, "--duration", "2h"
    ).stdout.strip()
    return Path(cluster.token_kubeconfig(token, f"system:serviceaccount:{namespace}:{name}", path))


def start_controller(
    kubeconfig: Path,
    namespace: str,
    pod: str,
    logs: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    allow_hosts: tuple[str, ...] = LOOPBACK_HOSTS,
) -> tuple[Process, int]:
    """A controller-mode gateway as a pod of `namespace` runs it; its admin port."""
    admin_port = free_port()
    process = Process(
        f"kubectl-e2e-{pod}",
        controller_cmd(kubeconfig, admin_port, *extra, allow_hosts=allow_hosts),
        logs,
        # As deploy/deployment.yaml gives them: the Lease lives in the pod's namespace.
        env={"POD_NAME": pod, "POD_NAMESPACE": namespace, **(env or {})},
    )
    return process, admin_port


def calls_seen_by_the_server(cluster: Any, user: str) -> dict[tuple[str, str, str], set[Any]]:
    """(verb, apiGroup, resource[/subresource]) -> response codes, from a `DevCluster`'s audit
    log."""
    seen: dict[tuple[str, str, str], set[Any]] = {}
    for event in cluster.audit_events(user):
        ref = event.get("objectRef")
        if ref is None:  # a non-resource URL (/version, /apis): no rule in deploy/ names one
            key = (event["verb"], "", event["requestURI"])
        else:
            resource = ref["resource"] + (f"/{ref['subresource']}" if "subresource" in ref else "")
            key = (event["verb"], ref.get("apiGroup", ""), resource)
        seen.setdefault(key, set()).add(event.get("responseStatus", {}).get("code"))
    return seen
