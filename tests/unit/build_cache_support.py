"""A cluster's objects for the incremental build's tests: a class with parameters, a Gateway
whose listeners take routes by namespace label and hostname, routes with backends in their own
and another namespace, Services, ReferenceGrants, policies reading keys through a Service and a
Secret for the backend, and the edits a cluster sees, one object (or setting) at a time.

Objects are parsed once per text, as the controller's cache keeps a model while its object
does not change: an edit gives new models for the edited documents only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType

from mcp_oauth_gateway.controller_name import CONTROLLER_NAME
from mcp_oauth_gateway.controlplane import Deployment
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.cluster_secrets import ClusterSecrets
from mcp_oauth_gateway.controlplane.egress import EgressRules
from mcp_oauth_gateway.resources.models import KINDS, Resource
from support import yaml_load

AT = "2026-01-01T00:00:00Z"
ISSUER = "http://authentik.example/application/o/mcp/"

DOCUMENTS: dict[str, str] = {
    "class": f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: mcp}}
spec:
  controllerName: {CONTROLLER_NAME}
  parametersRef: {{group: mcp-oauth-gateway.dev, kind: GatewayClassParameters, name: platform}}
""",
    "parameters": """
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayClassParameters
metadata: {name: platform}
spec: {allowedGatewayNamespaces: [gateways]}
""",
    "gateway": """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: gateways}
spec:
  gatewayClassName: mcp
  listeners:
    - name: tenants
      port: 8080
      allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {tenant: "yes"}}}}
    - name: public
      port: 8080
      hostname: "*.example.com"
      allowedRoutes: {namespaces: {from: All}}
""",
    "apps": """
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {tenant: "yes"}}
""",
    "tools": """
apiVersion: v1
kind: Namespace
metadata: {name: tools, labels: {tenant: "yes"}}
""",
    "idp service": """
apiVersion: v1
kind: Service
metadata: {name: authentik, namespace: idp}
spec: {ports: [{port: 9000}]}
""",
    "mcp service": """
apiVersion: v1
kind: Service
metadata: {name: mcp, namespace: apps}
spec: {ports: [{port: 8000}]}
""",
    "idp grant": """
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: policies, namespace: idp}
spec:
  from: [{group: mcp-oauth-gateway.dev, kind: GatewayPolicy, namespace: apps}]
  to: [{group: "", kind: Service}]
""",
    "tools grant": """
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: routes, namespace: tools}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: apps}]
  to: [{group: mcp-oauth-gateway.dev, kind: GatewayBackend}]
""",
}


def route(name: str, path: str, backend: str, hostnames: str = "[]") -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: apps}}
spec:
  parentRefs: [{{name: gw, namespace: gateways}}]
  hostnames: {hostnames}
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
      backendRefs: [{backend}]
"""


def backend(name: str, namespace: str, target: str) -> str:
    return f"""
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{mcp: {{targets: [{target}]}}}}
"""


def policy(name: str, route_name: str, rule: str, extra: str = "") -> str:
    return f"""
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: {name}, namespace: apps}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: {route_name}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [mcp-public]
          jwks:
            remote:
              backendRef: {{name: authentik, namespace: idp, port: 9000}}
              jwksPath: /application/o/mcp/jwks/
    authorization:
      action: Allow
      policy: {{matchExpressions: ['{rule}']}}
{extra}"""


SECRET_HEADER = """  backend:
    credentials:
      secretHeader:
        header: X-Api-Key
        value: {secretRef: {name: backend-key, key: key}}
"""

DOCUMENTS.update(
    {
        "r0": route("r0", "/r0", "{name: b0}"),
        "r1": route("r1", "/r1", "{name: b1}"),
        "r2": route("r2", "/r2", "{name: b2, namespace: tools}"),
        "r3": route("r3", "/r3", "{name: b0}", '["mcp.example.com"]'),
        "b0": backend("b0", "apps", "{name: t, static: {host: 10.0.0.1, port: 9000}}"),
        "b1": backend("b1", "apps", "{name: t, service: {name: mcp, port: 8000}}"),
        "b2": backend("b2", "tools", "{name: t, static: {host: 10.0.0.2, port: 9000}}"),
        "p0": policy("p0", "r0", '"team-0" in jwt.groups'),
        "p1": policy("p1", "r1", '"team-1" in jwt.groups', SECRET_HEADER),
        "p2": policy("p2", "r2", '"team-2" in jwt.groups'),
        "p3": policy("p3", "r3", '"team-3" in jwt.groups'),
    }
)


def secrets(value: bytes = b"s3cret") -> ClusterSecrets:
    return ClusterSecrets(
        MappingProxyType({("apps", "backend-key"): MappingProxyType({"key": value})}),
        frozenset({"apps"}),
    )


def deployment(value: bytes = b"s3cret", allowed: tuple[str, ...] = ("10.0.0.0/8",)) -> Deployment:
    """A cluster's deployment: the Secret the policies read, the hosts backends may name."""
    cluster = Cluster(services_listed=True, egress=EgressRules.of(allowed), secrets=secrets(value))
    return Deployment(processes=2, cluster=cluster)


@dataclass(frozen=True)
class State:
    """The cluster's objects (by document name) and the deployment they are built for."""

    documents: MappingProxyType[str, str]
    deployment: Deployment


BASE = State(MappingProxyType(dict(DOCUMENTS)), deployment())


def toggled(state: State, name: str, old: str, new: str) -> State:
    """`old` changed to `new` in a document, or back when it was changed already."""
    text = state.documents[name]
    text = text.replace(old, new) if old in text else text.replace(new, old)
    return replace(state, documents=MappingProxyType({**state.documents, name: text}))


def removed(state: State, name: str) -> State:
    """A document removed, or put back when it was removed already."""
    documents = dict(state.documents)
    if documents.pop(name, None) is None:
        documents[name] = DOCUMENTS[name]
    return replace(state, documents=MappingProxyType(documents))


def switched(state: State, one: Deployment, other: Deployment) -> State:
    """The deployment `one`, or `other` when it is `one` already."""
    return replace(state, deployment=other if state.deployment == one else one)


# Each edit changes one object, or one setting of the deployment (applied twice: undone).
EDITS: dict[str, Callable[[State], State]] = {
    "a policy's rule": lambda s: toggled(s, "p0", "team-0", "team-zero"),
    "a policy removed": lambda s: removed(s, "p2"),
    "a policy made invalid": lambda s: toggled(s, "p3", '"team-3" in jwt.groups', "jwt.("),
    "a backend's port": lambda s: toggled(s, "b0", "port: 9000", "port: 9001"),
    "a route's path": lambda s: toggled(s, "r1", "value: /r1}", "value: /renamed}"),
    "a route's hostname": lambda s: toggled(s, "r3", "mcp.example.com", "api.example.com"),
    "a route removed": lambda s: removed(s, "r0"),
    "a listener's hostname": lambda s: toggled(s, "gateway", "*.example.com", "*.example.org"),
    "a namespace's labels": lambda s: toggled(s, "apps", 'tenant: "yes"', 'tenant: "no"'),
    "a Service's ports": lambda s: toggled(s, "mcp service", "port: 8000", "port: 8001"),
    "the keys' Service": lambda s: toggled(s, "idp service", "port: 9000", "port: 9443"),
    "a ReferenceGrant for Services removed": lambda s: removed(s, "idp grant"),
    "a ReferenceGrant for backends removed": lambda s: removed(s, "tools grant"),
    "the class's parameters": lambda s: toggled(s, "parameters", "[gateways]", "[elsewhere]"),
    "a Secret's value": lambda s: switched(s, deployment(), deployment(value=b"rotated")),
    "the egress rules": lambda s: switched(s, deployment(), deployment(allowed=("10.0.0.1/32",))),
}


class Parsed:
    """Models by document text, each parsed once (the controller's cache keeps them so)."""

    def __init__(self) -> None:
        self._models: dict[str, Resource] = {}

    def objects(self, state: State) -> list[Resource]:
        out = []
        for text in state.documents.values():
            if text not in self._models:
                document = yaml_load(text)
                model = KINDS[document["apiVersion"], document["kind"]]
                self._models[text] = model.model_validate(document)
            out.append(self._models[text])
        return out
