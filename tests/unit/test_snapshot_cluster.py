"""The builder in Kubernetes mode: only Gateways of this controller's classes are served, routes
attach as listeners allow, cross-namespace references need a ReferenceGrant, Services resolve
to their cluster DNS names, and a missing Service is a ResolvedRefs problem."""

from __future__ import annotations

import yaml

from mcp_oauth_gateway.controller_name import CONTROLLER_NAME
from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.resources.models import KINDS

AT = "2026-01-01T00:00:00Z"
OURS = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: mcp}}
spec: {{controllerName: {CONTROLLER_NAME}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: other}}
spec: {{controllerName: example.com/another-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: gateways}}
spec:
  gatewayClassName: mcp
  listeners:
    - name: http
      port: 8080
      protocol: HTTP
      allowedRoutes: {{namespaces: {{from: All}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: theirs, namespace: gateways}}
spec:
  gatewayClassName: other
  listeners: [{{name: http, port: 9090, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: apps}}
spec:
  parentRefs: [{{name: gw, namespace: gateways}}, {{name: theirs, namespace: gateways}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend,
                     weight: 1}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: elsewhere, namespace: apps}}
spec:
  parentRefs: [{{name: theirs, namespace: gateways}}]
  rules: [{{backendRefs: [{{name: backend}}]}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend, namespace: apps}}
spec:
  mcp:
    targets: [{{name: t, service: {{name: mcp, port: 8000}}}}]
"""
POLICY = """
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {name: auth, namespace: apps}
spec:
  targetRefs: [{kind: HTTPRoute, name: mcp}]
  traffic:
    jwtAuthentication:
      mode: Strict
      providers:
        - issuer: http://authentik.example/application/o/mcp/
          audiences: [mcp-public]
          jwks:
            remote:
              backendRef: {kind: Service, name: authentik, namespace: idp, port: 9000}
              jwksPath: /application/o/mcp/jwks/
"""
GRANT = """
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: gateway-policies, namespace: idp}
spec:
  from: [{group: mcp-oauth-gateway.dev, kind: GatewayPolicy, namespace: apps}]
  to: [{group: "", kind: Service}]
"""


def objects(text: str) -> list[object]:
    """Documents as the controller gives them to the builder: bare models, no file source."""
    out = []
    for document in yaml.safe_load_all(text):
        if document:
            out.append(KINDS[document["apiVersion"], document["kind"]].model_validate(document))
    return out


def build(text: str, cluster: Cluster | None = None):
    return build_from_objects(
        objects(text), at=AT, deployment=Deployment(cluster=cluster or Cluster())
    )


def conditions(entries) -> dict[str, tuple[bool, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in entries}


def test_only_gateways_of_our_classes_are_served_and_given_status():
    result = build(OURS)
    assert set(result.snapshot.listeners) == {8080}
    assert ("Gateway", "gateways", "gw") in result.statuses
    assert ("Gateway", "gateways", "theirs") not in result.statuses
    assert ("GatewayClass", "", "mcp") in result.statuses
    assert ("GatewayClass", "", "other") not in result.statuses
    # A route only another controller's Gateway serves is none of ours.
    assert ("HTTPRoute", "apps", "elsewhere") not in result.statuses
    route = result.statuses["HTTPRoute", "apps", "mcp"]
    assert [p.parent_ref.name for p in route.parents] == ["gw"]


def test_files_serve_every_gateway_whatever_its_class():
    result = build_from_objects(objects(OURS), at=AT)
    assert set(result.snapshot.listeners) == {8080, 9090}


def test_listeners_take_routes_from_their_own_namespace_unless_told():
    same = OURS.replace("      allowedRoutes: {namespaces: {from: All}}\n", "")
    route = build(same).statuses["HTTPRoute", "apps", "mcp"]
    accepted = conditions(route.parents[0].conditions)["Accepted"]
    assert accepted[:2] == (False, "NotAllowedByListeners")
    assert "takes routes from namespace gateways only" in accepted[2]
    assert build(same).snapshot.listeners == {8080: ()}  # the port is served, without the route
    served = build(OURS).statuses["HTTPRoute", "apps", "mcp"]
    assert conditions(served.parents[0].conditions)["Accepted"][0] is True


def test_a_service_in_another_namespace_needs_a_reference_grant():
    refused = build(OURS + POLICY).snapshot.policies[0]
    accepted = conditions(refused.conditions)["Accepted"]
    assert accepted[0] is False
    assert (
        "Service idp/authentik is in another namespace: it needs a ReferenceGrant in namespace "
        "idp from GatewayPolicy (mcp-oauth-gateway.dev) in namespace apps to Service authentik"
    ) in accepted[2]
    granted = build(OURS + POLICY + GRANT)
    report = granted.snapshot.policies[0]
    assert report.ok, report.conditions
    assert list(granted.snapshot.keysets) == [
        "http://authentik.idp.svc.cluster.local:9000/application/o/mcp/jwks/"
    ]
    assert report.ancestors == ("gateways/gw",)


def test_the_cluster_domain_is_configurable():
    result = build(OURS + POLICY + GRANT, Cluster(cluster_domain="corp.internal"))
    assert list(result.snapshot.keysets) == [
        "http://authentik.idp.svc.corp.internal:9000/application/o/mcp/jwks/"
    ]


def test_a_missing_service_or_port_is_reported_when_services_are_listed():
    service = """
---
apiVersion: v1
kind: Service
metadata: {name: authentik, namespace: idp}
spec: {ports: [{port: 9443}]}
"""
    listed = Cluster(services_listed=True)
    for extra, why in (
        ("", "Service idp/authentik not found"),
        (service, "Service idp/authentik has no port 9000 (ports: [9443])"),
    ):
        report = build(OURS + POLICY + GRANT + extra, listed).snapshot.policies[0]
        assert report.ok  # valid and attached: the reference is what does not resolve
        assert report.unresolved == (
            f"spec.traffic.jwtAuthentication.providers[0].jwks.remote.backendRef: {why}",
        )
        resolved = conditions(
            ControlPlane(build(OURS + POLICY + GRANT + extra, listed).snapshot).conditions(report)
        )["ResolvedRefs"]
        assert resolved[0] is False
        assert why in resolved[2]
    unlisted = build(OURS + POLICY + GRANT).snapshot.policies[0]
    assert unlisted.unresolved == ()


def test_a_backend_in_another_namespace_needs_a_reference_grant():
    moved = OURS.replace(
        "name: backend,\n                     weight: 1",
        "name: backend, namespace: tools,\n                     weight: 1",
    )
    moved = moved.replace(
        "metadata: {name: backend, namespace: apps}", "metadata: {name: backend, namespace: tools}"
    )
    route = build(moved).statuses["HTTPRoute", "apps", "mcp"]
    resolved = conditions(route.parents[0].conditions)["ResolvedRefs"]
    assert resolved[:2] == (False, "RefNotPermitted")
    assert "GatewayBackend tools/backend is in another namespace" in resolved[2]
    grant = """
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: routes, namespace: tools}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: apps}]
  to: [{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend}]
"""
    route = build(moved + grant).statuses["HTTPRoute", "apps", "mcp"]
    assert conditions(route.parents[0].conditions)["ResolvedRefs"][0] is True


def test_a_policy_on_another_controllers_route_is_not_fetched_for():
    # Its keyset never served a request here: fetching it would hold this replica's readiness
    # (/readyz waits for every keyset) on a provider it has nothing to do with.
    theirs = (
        POLICY.replace("name: auth,", "name: theirs,")
        .replace("name: mcp}]", "name: elsewhere}]")
        .replace("authentik.example", "other.example")
        .replace("name: authentik,", "name: other-idp,")
    )
    result = build(OURS + POLICY + GRANT + theirs)
    fetched = list(result.snapshot.keysets)
    assert fetched == ["http://authentik.idp.svc.cluster.local:9000/application/o/mcp/jwks/"]
