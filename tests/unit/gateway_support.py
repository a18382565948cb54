"""Objects as the controller hands them to the builder (bare models, API-server timestamps), for
the tests of listener ownership, listener hostnames and class parameters."""

from __future__ import annotations

from typing import Any

from mcp_oauth_gateway.controller_name import CONTROLLER_NAME
from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.builder import BuildResult
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.resources.models import KINDS
from support import yaml_load_all

AT = "2026-01-01T00:00:00Z"
CLASS = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: mcp}}
spec: {{controllerName: {CONTROLLER_NAME}}}
"""


def gateway(
    namespace: str,
    listeners: str,
    created: str = "2026-01-01T00:00:00Z",
    name: str = "gw",
    class_name: str = "mcp",
) -> str:
    """A Gateway document; `listeners` is a YAML flow list."""
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {namespace}, creationTimestamp: "{created}"}}
spec:
  gatewayClassName: {class_name}
  listeners: {listeners}
"""


def route(
    namespace: str,
    parents: str,
    path: str = "/mcp",
    name: str = "r",
    hostnames: str = "[]",
    match: str = "PathPrefix",
) -> str:
    """An HTTPRoute (and its GatewayBackend) in `namespace`; `parents` is a YAML flow list."""
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {namespace}, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  parentRefs: {parents}
  hostnames: {hostnames}
  rules:
    - matches: [{{path: {{type: {match}, value: {path}}}}}]
      backendRefs: [{{name: {name}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: 9}}}}]}}}}
"""


def objects(text: str) -> list[Any]:
    """The documents as models (what the controller's cache holds)."""
    return [
        KINDS[document["apiVersion"], document["kind"]].model_validate(document)
        for document in yaml_load_all(text)
        if document
    ]


def build(text: str, cluster: bool = True) -> BuildResult:
    """Build in Kubernetes mode (or, `cluster=False`, as from files)."""
    deployment = Deployment(cluster=Cluster() if cluster else None)
    return build_from_objects(objects(text), at=AT, deployment=deployment)


def conditions(entries: Any) -> dict[str, tuple[bool, str, str]]:
    """Conditions by type: (status, reason, message)."""
    return {c.type: (c.status, c.reason, c.message) for c in entries}


def served_routes(result: BuildResult, port: int) -> list[str]:
    """The routes (`namespace/name`) on a port's table, in precedence order."""
    return [compiled.route for compiled in result.snapshot.listeners.get(port, ())]
