"""The objects, users and status reads of the listener-ownership tests (a platform
namespace and tenant namespaces on one gateway), and the loopback server tenants send to."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import yaml

from devcluster.cluster import DevCluster
from kube_support import WAIT
from support import wait_until

PLATFORM = "platform"
USERS = {"tenant-a": "alice", "tenant-b": "bob"}
CLASS = "tenancy"
CLIENT_ID = "mcp-public"
GATEWAY_API = "gateway.networking.k8s.io/v1"
OURS = "mcp-oauth-gateway.dev/v1alpha1"
CONTROLLER = "mcp-oauth-gateway.dev/gateway-controller"
# The tenants' listener on the platform's Gateway takes these names only.
TENANT_HOSTS = "*.tenants.example"


# --- what a tenant points its routes at ----------------------------------------------------


@dataclass
class Trap:
    """A loopback HTTP server answering 200 to anything, recording (host, path, had a token)."""

    url: str
    seen: list[tuple[str, str, bool]] = field(default_factory=list)


def trap_handler(trap: Trap) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            host = self.headers.get("X-Forwarded-Host") or self.headers.get("Host") or ""
            trap.seen.append((host, self.path, "Authorization" in self.headers))
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"trap": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


# --- users and objects ------------------------------------------------------------------------


def tenant_role() -> list[dict[str, Any]]:
    """A ClusterRole to write the routing kinds, bound in each tenant's namespace only."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "tenant-routing"},
        "rules": [
            {
                "apiGroups": ["gateway.networking.k8s.io"],
                "resources": ["gateways", "httproutes"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            },
            {
                "apiGroups": ["mcp-oauth-gateway.dev"],
                "resources": ["gatewaypolicies", "gatewaybackends"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            },
        ],
    }
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant-routing", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "tenant-routing",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
        for namespace, user in USERS.items()
    ]
    return [role, *bindings]


def apply(cluster: DevCluster, docs: list[dict[str, Any]], user: str | None = None) -> None:
    """`kubectl apply` as the admin, or as a tenant (`--as`)."""
    who = ["--as", user] if user else []
    cluster.kubectl("apply", "--validate=strict", *who, "-f", "-", stdin=yaml.safe_dump_all(docs))


def delete(cluster: DevCluster, docs: list[dict[str, Any]], user: str | None = None) -> None:
    who = ["--as", user] if user else []
    cluster.kubectl("delete", "--wait", *who, "-f", "-", stdin=yaml.safe_dump_all(docs))


def gateway(namespace: str, name: str, listeners: list[dict[str, Any]], cls: str = CLASS) -> dict:
    return {
        "apiVersion": GATEWAY_API,
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gatewayClassName": cls, "listeners": listeners},
    }


def routed(
    namespace: str,
    name: str,
    parent: dict[str, Any],
    target: str,
    match: str = "Exact",
    hostnames: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """An HTTPRoute of `/mcp` and the GatewayBackend it sends to (`target`: host:port)."""
    host, port = target.rsplit(":", 1)
    spec: dict[str, Any] = {
        "parentRefs": [parent],
        "rules": [
            {
                "matches": [{"path": {"type": match, "value": "/mcp"}}],
                "backendRefs": [
                    {"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend", "name": name}
                ],
            }
        ],
    }
    if hostnames:
        spec["hostnames"] = list(hostnames)
    static = {"host": host, "port": int(port), "path": "/mcp"}
    return [
        {
            "apiVersion": GATEWAY_API,
            "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        },
        {
            "apiVersion": OURS,
            "kind": "GatewayBackend",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"mcp": {"targets": [{"name": "t", "static": static}]}},
        },
    ]


def class_parameters(name: str, namespaces: list[str]) -> dict[str, Any]:
    """A GatewayClassParameters allowing Gateways in `namespaces` only."""
    return {
        "apiVersion": OURS,
        "kind": "GatewayClassParameters",
        "metadata": {"name": name},
        "spec": {"allowedGatewayNamespaces": namespaces},
    }


def restricted_class(name: str, parameters: str) -> dict[str, Any]:
    """A GatewayClass of ours whose parametersRef names the GatewayClassParameters `parameters`."""
    ref = {"group": "mcp-oauth-gateway.dev", "kind": "GatewayClassParameters", "name": parameters}
    return {
        "apiVersion": GATEWAY_API,
        "kind": "GatewayClass",
        "metadata": {"name": name},
        "spec": {"controllerName": CONTROLLER, "parametersRef": ref},
    }


def platform_objects(port: int, idp: str, backend: str) -> list[dict[str, Any]]:
    """The admin's class, Gateway (two listeners on one port), route and policy."""
    policy = {
        "apiVersion": OURS,
        "kind": "GatewayPolicy",
        "metadata": {"name": "auth", "namespace": PLATFORM},
        "spec": {
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "mcp"}
            ],
            "traffic": {
                "jwtAuthentication": {
                    "mode": "Strict",
                    "providers": [
                        {
                            "issuer": f"{idp}/application/o/mcp/",
                            "audiences": [CLIENT_ID],
                            "jwks": {"remote": {"url": f"{idp}/application/o/mcp/jwks/"}},
                        }
                    ],
                }
            },
        },
    }
    listeners = [
        {"name": "api", "port": port, "protocol": "HTTP"},
        {
            "name": "tenants",
            "port": port,
            "protocol": "HTTP",
            "hostname": TENANT_HOSTS,
            "allowedRoutes": {"namespaces": {"from": "All"}},
        },
    ]
    return [
        {
            "apiVersion": GATEWAY_API,
            "kind": "GatewayClass",
            "metadata": {"name": CLASS},
            "spec": {"controllerName": CONTROLLER},
        },
        gateway(PLATFORM, "gw", listeners),
        *routed(PLATFORM, "mcp", {"name": "gw", "sectionName": "api"}, backend, "PathPrefix"),
        policy,
    ]


# --- reading status ---------------------------------------------------------------------------


def read(cluster: DevCluster, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    where = ["-n", namespace] if namespace else []
    found: dict[str, Any] = json.loads(
        cluster.kubectl("get", kind, name, *where, "-o", "json").stdout
    )
    return found


def conditions_of(entries: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in entries or []}


def wait_for(cluster: DevCluster, what: str, check: Any) -> Any:
    """Poll `check()` (None until it holds) and return what it found."""
    found: list[Any] = []

    def ready() -> bool:
        value = check()
        if value is not None:
            found.append(value)
        return value is not None

    wait_until(ready, WAIT, what)
    return found[0]


def gateway_condition(
    cluster: DevCluster, namespace: str, name: str, kind: str, status: str | None = None
) -> dict[str, Any]:
    """The Gateway once its condition `kind` is for its current generation (and has `status`,
    when given): the controller has judged it, and serves what it decided."""

    def check() -> dict[str, Any] | None:
        obj = read(cluster, "gateway", namespace, name)
        found = conditions_of((obj.get("status") or {}).get("conditions")).get(kind)
        # The API server's default (Unknown, Pending, no generation) is nobody's verdict yet.
        if found is None or found.get("observedGeneration") != obj["metadata"]["generation"]:
            return None
        return obj if status is None or found["status"] == status else None

    obj: dict[str, Any] = wait_for(cluster, f"Gateway {namespace}/{name} {kind}={status}", check)
    return obj


def route_parent(
    cluster: DevCluster, namespace: str, name: str, status: str | None = None
) -> dict[str, Any]:
    """Our `status.parents[]` entry's Accepted condition, once there is one (with `status`,
    when given)."""

    def check() -> dict[str, Any] | None:
        obj = read(cluster, "httproute", namespace, name)
        for parent in (obj.get("status") or {}).get("parents") or []:
            if parent.get("controllerName") != CONTROLLER:
                continue
            accepted = conditions_of(parent.get("conditions")).get("Accepted")
            if accepted and (status is None or accepted["status"] == status):
                return accepted
        return None

    found: dict[str, Any] = wait_for(cluster, f"HTTPRoute {namespace}/{name} {status}", check)
    return found
