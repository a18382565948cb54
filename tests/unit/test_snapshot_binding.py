"""The builder's decisions about references: route → Gateway listeners, policy → route."""

from __future__ import annotations

from mcp_oauth_gateway.controlplane.binding import attach_policies, bind_routes, binding_errors
from mcp_oauth_gateway.controlplane.builder import build_from_objects
from mcp_oauth_gateway.controlplane.objects import index_objects
from mcp_oauth_gateway.resources import load_paths

from .resources_fixture import BASE, policy, write

GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  listeners: [{name: http, port: 8080}, {name: alt, port: 8081}]
"""


def route(name: str, parents: str, backend: str = "backend") -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: {parents}
  rules: [{{backendRefs: [{{name: {backend}}}]}}]
"""


def index(tmp_path, text):
    loaded = load_paths([write(tmp_path, text)])
    assert not loaded.errors, loaded.errors
    return index_objects(loaded.resources)


def bindings(tmp_path, text):
    objects = index(tmp_path, text)
    return objects, bind_routes(objects.routes, objects.gateways)


def test_parent_ref_to_a_missing_gateway_is_a_load_error(tmp_path):
    objects, bound = bindings(tmp_path, GATEWAY + route("r", "[{name: other}]"))
    parent = bound["default/r"].parents[0]
    assert parent.problem == "spec.parentRefs[0]: Gateway default/other not found"
    assert not parent.accepted
    assert not bound["default/r"].has_gateway
    assert bound["default/r"].ports == frozenset()
    errors = binding_errors(objects.routes, bound)
    assert errors == [
        f"{tmp_path / 'resources.yaml'} (document 2): HTTPRoute default/r: "
        "spec.parentRefs[0]: Gateway default/other not found"
    ]


def test_section_name_selects_one_listener(tmp_path):
    _, bound = bindings(tmp_path, GATEWAY + route("r", "[{name: gw, sectionName: alt}]"))
    assert bound["default/r"].ports == {8081}
    assert [listener.name for listener in bound["default/r"].parents[0].listeners] == ["alt"]


def test_unknown_section_name_names_the_listeners(tmp_path):
    _, bound = bindings(tmp_path, GATEWAY + route("r", "[{name: gw, sectionName: nope}]"))
    assert bound["default/r"].parents[0].problem == (
        "spec.parentRefs[0].sectionName: Gateway default/gw has no listener 'nope' "
        "(listeners: ['alt', 'http'])"
    )


def test_a_port_no_listener_has_refuses_the_route_without_a_load_error(tmp_path):
    objects, bound = bindings(tmp_path, GATEWAY + route("r", "[{name: gw, port: 9999}]"))
    binding = bound["default/r"]
    parent = binding.parents[0]
    assert parent.problem is None
    assert not parent.accepted
    assert (
        parent.refusal == "spec.parentRefs[0].port: Gateway default/gw has no listener on port 9999"
    )
    # The Gateway exists, so a policy still attaches to the route (as before the split).
    assert binding.has_gateway
    assert binding.ports == frozenset()
    assert binding_errors(objects.routes, bound) == []


def test_each_parent_ref_is_bound_with_its_own_port(tmp_path):
    _, bound = bindings(tmp_path, GATEWAY + route("r", "[{name: other}, {name: gw, port: 8081}]"))
    assert bound["default/r"].ports == {8081}


def test_every_listener_of_the_gateway_serves_a_route_without_section_or_port(tmp_path):
    _, bound = bindings(tmp_path, GATEWAY + route("r", "[{name: gw}]"))
    assert bound["default/r"].ports == {8080, 8081}
    loaded = load_paths([write(tmp_path, GATEWAY + route("r", "[{name: gw}]"))])
    listeners = build_from_objects(loaded.resources, at="T").snapshot.listeners
    assert [compiled.route for compiled in listeners[8081]] == ["default/r"]


def test_first_policy_by_name_governs_and_later_ones_conflict(tmp_path):
    objects, bound = bindings(tmp_path, BASE + policy(name="b") + policy(name="a"))
    result = attach_policies(objects.policies, {"default/a", "default/b"}, bound)
    assert result.governing == {"default/mcp": "default/a"}
    assert result.conflicts["default/b"] == (
        "HTTPRoute default/mcp is already governed by GatewayPolicy default/a",
    )
    assert result.conflicts["default/a"] == ()


def test_an_invalid_policy_claims_a_free_route_so_it_fails_closed(tmp_path):
    objects, bound = bindings(tmp_path, BASE + policy(name="a") + policy(name="b"))
    invalid_first = attach_policies(objects.policies, {"default/b"}, bound)
    assert invalid_first.governing == {"default/mcp": "default/a"}
    assert invalid_first.conflicts["default/b"]
    valid_first = attach_policies(objects.policies, {"default/a"}, bound)
    assert valid_first.governing == {"default/mcp": "default/a"}
    assert valid_first.conflicts["default/b"]


def test_targets_missing_or_not_attached_to_a_gateway(tmp_path):
    text = BASE.replace("parentRefs: [{name: gw}]", "parentRefs: [{name: other}]")
    objects, bound = bindings(tmp_path, text + policy(name="a") + policy(name="b", target="nope"))
    result = attach_policies(objects.policies, {"default/a", "default/b"}, bound)
    assert result.governing == {}
    assert result.missing["default/a"] == ("HTTPRoute default/mcp is not attached to any Gateway",)
    assert result.missing["default/b"] == ("HTTPRoute default/nope not found",)
