"""A cluster shared by tenants who do not trust each other, on the full API server.

The platform (the cluster admin) installs the CRDs and `deploy/` and owns a Gateway; each tenant
is a namespace and a user bound to a Role that may write the gateway's kinds, HTTPRoutes,
Services, Secrets and ReferenceGrants there and nowhere else. Tenants act as themselves
(`kubectl --as`), so the API server's RBAC, not the test, decides what they can write.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster.apiserver import CRDS
from devcluster.cluster import DevCluster
from kube_support import service_account_kubeconfig, start_controller
from support import ROOT, Process

INSTALL_NS = "mcp-oauth-gateway"
ACCOUNT = "mcp-oauth-gateway"
GATEWAY_API_CRDS = sorted(CRDS.glob("*.gateway.networking.k8s.io.yaml"))
TENANT_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "mcp-tenant"},
    "rules": [
        {
            "apiGroups": ["mcp-oauth-gateway.dev"],
            "resources": ["gatewaypolicies", "gatewaybackends"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["gateway.networking.k8s.io"],
            "resources": ["httproutes", "referencegrants", "gateways"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": [""],
            "resources": ["services", "secrets"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
    ],
}


def install(cluster: DevCluster) -> None:
    """The Gateway API CRDs, then `kubectl apply -k deploy/`, as the platform does."""
    for crd in GATEWAY_API_CRDS:
        cluster.kubectl("apply", "--validate=strict", "-f", str(crd))
    names = [f"crd/{crd.name.removesuffix('.yaml')}" for crd in GATEWAY_API_CRDS]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    cluster.kubectl("apply", "--validate=strict", "-k", str(ROOT / "deploy"))
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(TENANT_ROLE))


@dataclass(frozen=True)
class Tenant:
    """A namespace and the user who owns it."""

    cluster: DevCluster
    namespace: str
    user: str

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        """`kubectl --as USER -n NAMESPACE ARGS`: what the API server lets this tenant do."""
        return self.cluster.kubectl(
            "--as", self.user, "-n", self.namespace, *args, stdin=stdin, check=check
        )

    def apply(self, *documents: dict[str, Any]) -> None:
        """`kubectl apply` of the documents, as the tenant, into its namespace."""
        for document in documents:
            document.setdefault("metadata", {})["namespace"] = self.namespace
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))

    def status(self, kind: str, name: str) -> dict[str, Any]:
        """An object's status, as the tenant reads it."""
        found: dict[str, Any] = json.loads(self.kubectl("get", kind, name, "-o", "json").stdout)
        return found.get("status") or {}


def tenant(cluster: DevCluster, namespace: str, user: str) -> Tenant:
    """Create the namespace and bind `user` to the tenant role there (as the platform)."""
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl(
        "create",
        "rolebinding",
        "mcp-tenant",
        "--clusterrole=mcp-tenant",
        f"--user={user}",
        "--namespace",
        namespace,
    )
    return Tenant(cluster, namespace, user)


def installed_controller(
    cluster: DevCluster, logs: Path, workdir: Path, allow_hosts: tuple[str, ...]
) -> tuple[Process, int]:
    """The controller as `deploy/`'s ServiceAccount runs it (a token from `kubectl create
    token`, so RBAC judges every call), with the operator's `--allow-hosts`; its admin port."""
    kubeconfig = service_account_kubeconfig(cluster, INSTALL_NS, ACCOUNT, workdir / "kubeconfig")
    return start_controller(kubeconfig, INSTALL_NS, "gateway-0", logs, allow_hosts=allow_hosts)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """A condition of a status by type (None while it has none)."""
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def external_service(name: str, host: str, port: int) -> dict[str, Any]:
    """A Service of type ExternalName: the cluster's DNS name for `host`."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": "ExternalName", "externalName": host, "ports": [{"port": port}]},
    }


def mcp_route(name: str, path: str, backend: str, gateway: tuple[str, str]) -> dict[str, Any]:
    """An HTTPRoute on the platform's Gateway sending `path` to the GatewayBackend `backend`."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {
            "parentRefs": [{"name": gateway[1], "namespace": gateway[0]}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                    "backendRefs": [
                        {
                            "group": "mcp-oauth-gateway.dev",
                            "kind": "GatewayBackend",
                            "name": backend,
                        }
                    ],
                }
            ],
        },
    }


def mcp_backend(name: str, target: dict[str, Any]) -> dict[str, Any]:
    """A GatewayBackend with one target (`target` holds `static` or `service`)."""
    return {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayBackend",
        "metadata": {"name": name},
        "spec": {"mcp": {"targets": [{"name": "t", **target}]}},
    }


def inline_policy(
    name: str,
    route: str,
    issuer: str,
    jwks: str,
    extra: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """A GatewayPolicy on `route` accepting tokens of `issuer` signed by the keys `jwks`."""
    policy: dict[str, Any] = {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayPolicy",
        "metadata": {"name": name},
        "spec": {
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route}
            ],
            "traffic": {
                "jwtAuthentication": {
                    "providers": [
                        {"issuer": issuer, "audiences": ["mcp"], "jwks": {"inline": jwks}}
                    ]
                }
            },
        },
    }
    if extra is not None:
        extra(policy)
    return policy


def platform_gateway(namespace: str, name: str, listeners: list[dict[str, Any]]) -> str:
    """The platform's GatewayClass of this controller and a Gateway of it, as `kubectl apply`
    input (JSON)."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "gateway.networking.k8s.io/v1",
                    "kind": "GatewayClass",
                    "metadata": {"name": "mcp"},
                    "spec": {"controllerName": "mcp-oauth-gateway.dev/gateway-controller"},
                },
                {
                    "apiVersion": "gateway.networking.k8s.io/v1",
                    "kind": "Gateway",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"gatewayClassName": "mcp", "listeners": listeners},
                },
            ],
        }
    )
