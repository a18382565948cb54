"""The builder in controller mode: every host a tenant's objects make the gateway connect to is a
Service (another namespace's only with a ReferenceGrant there) or a host the operator allows that
namespace; anything else refuses the object, and its routes answer 503 naming why."""

from __future__ import annotations

import pytest
import yaml

from mcp_oauth_gateway.controller_name import CONTROLLER_NAME
from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.egress import EgressRules
from mcp_oauth_gateway.resources.models import KINDS

AT = "2026-01-01T00:00:00Z"
GATEWAY = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: mcp}}
spec: {{controllerName: {CONTROLLER_NAME}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: platform}}
spec:
  gatewayClassName: mcp
  listeners: [{{name: http, port: 8080, protocol: HTTP,
                allowedRoutes: {{namespaces: {{from: All}}}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: team-a}}
spec:
  parentRefs: [{{name: gw, namespace: platform}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /a/mcp}}}}]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend}}]
"""


def backend(target: str) -> str:
    return f"""
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend, namespace: team-a}}
spec:
  mcp:
    targets: [{{name: t, {target}}}]
"""


def service(name: str, namespace: str, external: str | None = None) -> str:
    spec = (
        f"{{type: ExternalName, externalName: {external}, ports: [{{port: 8000}}]}}"
        if external
        else "{ports: [{port: 8000}]}"
    )
    return f"""
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}}}
spec: {spec}
"""


GRANT = """
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: backends, namespace: team-b}
spec:
  from: [{group: mcp-oauth-gateway.dev, kind: GatewayBackend, namespace: team-a}]
  to: [{group: "", kind: Service, name: tools}]
"""


def policy(provider: str, extra: str = "") -> str:
    return f"""
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: auth, namespace: team-a}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers: [{provider}]
{extra}"""


SERVICE_JWKS = (
    "{issuer: 'https://idp.example/realms/a', jwks: {remote: {backendRef: {name: idp, "
    "port: 8080}, jwksPath: /certs}}}"
)


def build(text: str, allow: tuple[str, ...] = (), services_listed: bool = True):
    objects = [
        KINDS[d["apiVersion"], d["kind"]].model_validate(d) for d in yaml.safe_load_all(text) if d
    ]
    cluster = Cluster(services_listed=services_listed, egress=EgressRules.of(allow))
    return build_from_objects(objects, at=AT, deployment=Deployment(cluster=cluster))


def route_target(result):
    (route,) = result.snapshot.listeners[8080]
    return route


def backend_accepted(result):
    status = result.statuses["GatewayBackend", "team-a", "backend"]
    return {c.type: (c.status, c.reason, c.message) for c in status.conditions}["Accepted"]


def test_a_service_in_the_backends_own_namespace_is_its_cluster_dns_name():
    result = build(
        GATEWAY + backend("service: {name: tools, port: 8000}") + service("tools", "team-a")
    )
    route = route_target(result)
    assert route.broken is None
    assert (route.target.host, route.target.port) == ("tools.team-a.svc.cluster.local", 8000)
    assert backend_accepted(result)[0] is True


@pytest.mark.parametrize(
    "target",
    [
        # The finding: another namespace's Service as a raw host, and the pod and metadata
        # addresses, and whatever else a tenant writes as a host.
        "static: {host: tools.team-b.svc.cluster.local, port: 8000}",
        "static: {host: 10.96.0.10, port: 8000}",
        "static: {host: 169.254.169.254, port: 80}",
        "static: {host: 127.0.0.1, port: 9090}",
        "static: {host: localhost, port: 9090}",
        "static: {host: 'fd00:ec2::254', port: 80}",
    ],
)
def test_a_raw_host_is_refused_unless_the_operator_allows_it(target):
    result = build(GATEWAY + backend(target))
    route = route_target(result)
    assert route.target is None
    assert route.broken is not None
    assert "spec.mcp.targets[0].static.host" in route.broken
    accepted = backend_accepted(result)
    assert accepted[:2] == (False, "RefNotPermitted")
    status = result.statuses["HTTPRoute", "team-a", "mcp"]
    resolved = {c.type: c for c in status.parents[0].conditions}["ResolvedRefs"]
    assert (resolved.status, resolved.reason) == (False, "RefNotPermitted")


def test_an_allowed_host_is_used_and_link_local_never_is():
    allowed = build(
        GATEWAY + backend("static: {host: mcp.partner.example, port: 443, tls: {}}"),
        allow=("team-a=*.partner.example",),
    )
    assert route_target(allowed).target.host == "mcp.partner.example"
    other = build(
        GATEWAY + backend("static: {host: mcp.partner.example, port: 443, tls: {}}"),
        allow=("team-b=*.partner.example",),
    )
    assert route_target(other).target is None
    metadata = build(
        GATEWAY + backend("static: {host: 169.254.169.254, port: 80}"),
        allow=("*", "169.254.0.0/16"),
    )
    assert "link-local" in (route_target(metadata).broken or "")


def test_another_namespaces_service_needs_a_grant_and_says_nothing_of_it_without_one():
    text = GATEWAY + backend("service: {name: tools, namespace: team-b, port: 8000}")
    for extra in ("", service("tools", "team-b")):
        refused = build(text + extra)
        message = route_target(refused).broken or ""
        assert "needs a ReferenceGrant in namespace team-b" in message
        assert "not found" not in message  # whether it exists is not told
    granted = build(text + service("tools", "team-b") + GRANT)
    assert route_target(granted).target.host == "tools.team-b.svc.cluster.local"
    # The grant names one Service: another is still refused.
    other = build(GATEWAY + backend("service: {name: db, namespace: team-b, port: 8000}") + GRANT)
    assert route_target(other).target is None


def test_an_external_name_service_is_held_to_the_allow_list_of_its_own_namespace():
    text = GATEWAY + backend("service: {name: tools, port: 8000}")
    for external in (
        "169.254.169.254",
        "metadata.google.internal",
        "tools.team-b.svc.cluster.local",
    ):
        refused = build(text + service("tools", "team-a", external))
        assert "is of type ExternalName" in (route_target(refused).broken or ""), external
    allowed = build(
        text + service("tools", "team-a", "mcp.partner.example"),
        allow=("team-a=mcp.partner.example",),
    )
    assert route_target(allowed).target.host == "mcp.partner.example"


def test_a_missing_service_is_reported_and_still_named():
    result = build(GATEWAY + backend("service: {name: tools, port: 8000}"))
    assert route_target(result).target.host == "tools.team-a.svc.cluster.local"
    status = result.statuses["GatewayBackend", "team-a", "backend"]
    resolved = {c.type: c for c in status.conditions}["ResolvedRefs"]
    assert (resolved.status, resolved.reason) == (False, "BackendNotFound")
    assert "Service team-a/tools not found" in resolved.message


@pytest.mark.parametrize(
    ("provider", "extra", "field"),
    [
        (
            "{issuer: 'https://idp.example/a', jwks: {remote: {url: 'http://169.254.169.254/keys'}}}",
            "",
            "providers[0].jwks.remote.url",
        ),
        (
            "{issuer: 'https://idp.example/a', jwks: {remote: {url: 'https://idp.example/keys'}}}",
            "",
            "providers[0].jwks.remote.url",
        ),
        (
            # Broker mode reads the discovery document from the issuer's own host.
            "{issuer: 'http://10.0.0.9/a', jwks: {inline: '{\"keys\": []}'}}",
            "      mcp: {provider: Keycloak, authorizationServerMode: Broker, clientId: c}\n",
            "providers[0].issuer",
        ),
        (
            SERVICE_JWKS,
            "      mcp: {provider: Keycloak, authorizationServerMode: Broker, clientId: c,\n"
            "            broker: {redisUrl: 'redis://redis.platform.svc.cluster.local:6379/0'}}\n",
            "mcp.broker.redisUrl",
        ),
        (
            SERVICE_JWKS,
            "    rateLimit: {key: jwt.sub, requests: 5, redisUrl: 'unix:///run/redis.sock'}\n",
            "rateLimit.redisUrl",
        ),
        (
            # A Sentinel set names the primary itself: past every rule, so never a tenant's.
            SERVICE_JWKS,
            "    rateLimit: {key: jwt.sub, requests: 5, redisUrl: "
            "'redis+sentinel://:pw@redis.platform.svc.cluster.local:26379/mymaster/0'}\n",
            "rateLimit.redisUrl: 'redis+sentinel://***@redis.platform.svc.cluster.local:26379"
            "/mymaster/0': a Sentinel or Cluster URL in a tenant's policy",
        ),
        (
            SERVICE_JWKS,
            "      mcp: {provider: Keycloak, authorizationServerMode: Broker, clientId: c,\n"
            "            broker: {redisUrl: 'redis+cluster://10.0.0.1:7000,10.0.0.2:7000/'}}\n",
            "mcp.broker.redisUrl: 'redis+cluster://10.0.0.1:7000,10.0.0.2:7000/': a Sentinel",
        ),
    ],
)
def test_every_url_a_policy_makes_the_gateway_fetch_is_held_to_the_rules(provider, extra, field):
    result = build(
        GATEWAY + backend("service: {name: tools, port: 8000}") + policy(provider, extra)
    )
    (report,) = result.snapshot.policies
    accepted = {c.type: c for c in report.conditions}["Accepted"]
    assert accepted.status is False
    assert field in accepted.message
    assert route_target(result).policy.invalid is not None  # its route answers 503


def test_a_service_reference_needs_no_entry_and_an_issuer_not_fetched_is_not_checked():
    # Discovery goes through the Service: the issuer is only compared with `iss`.
    text = (
        GATEWAY
        + backend("service: {name: tools, port: 8000}")
        + policy(
            SERVICE_JWKS,
            "      mcp: {provider: Keycloak, authorizationServerMode: Broker, clientId: c}\n",
        )
    )
    (report,) = build(text).snapshot.policies
    accepted = {c.type: c for c in report.conditions}["Accepted"]
    assert accepted.status is True, accepted.message


def test_files_are_the_operators_own_and_use_every_host():
    objects = [
        KINDS[d["apiVersion"], d["kind"]].model_validate(d)
        for d in yaml.safe_load_all(GATEWAY + backend("static: {host: 127.0.0.1, port: 8000}"))
        if d
    ]
    result = build_from_objects(objects, at=AT)
    assert route_target(result).target.host == "127.0.0.1"


def test_from_files_a_service_target_is_its_external_name():
    text = GATEWAY + backend("service: {name: tools, port: 8000}")
    objects = [
        KINDS[d["apiVersion"], d["kind"]].model_validate(d)
        for d in yaml.safe_load_all(text + service("tools", "team-a", "mcp.internal"))
        if d
    ]
    assert route_target(build_from_objects(objects, at=AT)).target.host == "mcp.internal"
    missing = [
        KINDS[d["apiVersion"], d["kind"]].model_validate(d) for d in yaml.safe_load_all(text) if d
    ]
    broken = route_target(build_from_objects(missing, at=AT)).broken or ""
    assert "Service team-a/tools not found (define a Service of type ExternalName" in broken
