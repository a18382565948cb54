"""Equal matches on one listener: the oldest route wins (creation timestamp), then the first by
namespace/name, as Gateway API says (issue 25, item 2); the losing route's status says which of
its matches is shadowed and by whom."""

from __future__ import annotations

from mcp_oauth_gateway.controlplane import build_from_objects
from mcp_oauth_gateway.controlplane.objects import ObjectKey
from mcp_oauth_gateway.resources import load_paths
from unit.resources_fixture import BASE, policy, write


def route(name: str, namespace: str, created: str | None, path: str = "/mcp") -> str:
    stamp = f", creationTimestamp: '{created}'" if created else ""
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {namespace}{stamp}}}
spec:
  parentRefs: [{{name: gw, namespace: default}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
      backendRefs: [{{name: backend, namespace: default}}]
"""


OPEN = BASE.replace(
    "listeners: [{name: http, port: 8080, protocol: HTTP}]",
    "listeners: [{name: http, port: 8080, protocol: HTTP,"
    " allowedRoutes: {namespaces: {from: All}}}]",
)
GRANT = """
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: any, namespace: default}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: aaa}]
  to: [{group: mcp-oauth-gateway.dev, kind: GatewayBackend}]
"""


def build(tmp_path, text: str):
    loaded = load_paths([write(tmp_path, text)])
    assert not loaded.errors, loaded.errors
    return build_from_objects(loaded.resources, at="T")


def serving(result, path: str = "/mcp") -> str:
    routes = result.snapshot.listeners[8080]
    return next(r.route for r in routes if r.match_value == path)


def accepted_message(result, namespace: str, name: str) -> str:
    (parent,) = result.statuses[ObjectKey("HTTPRoute", namespace, name)].parents
    return next(c.message for c in parent.conditions if c.type == "Accepted")


def test_the_older_route_wins_whatever_its_name(tmp_path):
    text = (
        OPEN.replace(
            "metadata: {name: mcp}",
            "metadata: {name: mcp, creationTimestamp: '2026-01-01T00:00:00Z'}",
        )
        + policy()
        + route("hijack", "aaa", "2026-06-01T00:00:00Z")
        + GRANT
    )
    result = build(tmp_path, text)
    assert serving(result) == "default/mcp"
    assert "shadowed by HTTPRoute default/mcp" in accepted_message(result, "aaa", "hijack")
    assert "shadowed" not in accepted_message(result, "default", "mcp")


def test_an_older_route_takes_the_match_from_a_newer_one(tmp_path):
    text = (
        OPEN.replace(
            "metadata: {name: mcp}",
            "metadata: {name: mcp, creationTimestamp: '2026-06-01T00:00:00Z'}",
        )
        + policy()
        + route("first", "aaa", "2026-01-01T00:00:00Z")
        + GRANT
    )
    assert serving(build(tmp_path, text)) == "aaa/first"


def test_without_timestamps_the_first_by_namespace_and_name_wins(tmp_path):
    result = build(tmp_path, OPEN + policy() + route("hijack", "aaa", None) + GRANT)
    assert serving(result) == "aaa/hijack"
    assert "shadowed by HTTPRoute aaa/hijack" in accepted_message(result, "default", "mcp")


def test_different_paths_shadow_nothing(tmp_path):
    result = build(tmp_path, OPEN + policy() + route("other", "aaa", None, "/other") + GRANT)
    assert "shadowed" not in accepted_message(result, "aaa", "other")
    assert "shadowed" not in accepted_message(result, "default", "mcp")
