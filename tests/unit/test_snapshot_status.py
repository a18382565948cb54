"""The status the builder derives for every object, policies and the other kinds alike."""

from __future__ import annotations

from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.resources import load_paths

from .resources_fixture import BASE, policy, write

AT = "2025-01-02T03:04:05Z"


def build(tmp_path, text, sources=True):
    loaded = load_paths([write(tmp_path, text)])
    assert not loaded.errors, loaded.errors
    objects = loaded.resources if sources else [item.resource for item in loaded.resources]
    return build_from_objects(objects, at=AT)


def conditions(entry) -> dict[str, tuple[bool, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in entry}


def test_every_object_gets_a_status_keyed_by_kind_namespace_and_name(tmp_path):
    result = build(tmp_path, BASE + policy())
    assert set(result.statuses) == {
        ("Gateway", "default", "gw"),
        ("HTTPRoute", "default", "mcp"),
        ("GatewayBackend", "default", "backend"),
        ("Service", "default", "authentik"),
        ("GatewayPolicy", "default", "auth"),
    }


def test_policy_status_is_exactly_its_reported_conditions(tmp_path):
    result = build(tmp_path, BASE + policy(name="a") + policy(name="b"))
    for report in result.snapshot.policies:
        namespace, name = report.key.split("/")
        assert result.statuses["GatewayPolicy", namespace, name].conditions == report.conditions
    assert conditions(result.statuses["GatewayPolicy", "default", "b"].conditions)["Attached"][
        :2
    ] == (False, "Conflicted")


def test_attached_route_is_accepted_with_resolved_refs(tmp_path):
    route = build(tmp_path, BASE + policy()).statuses["HTTPRoute", "default", "mcp"]
    assert route.conditions == ()
    (parent,) = route.parents
    assert parent.parent_ref.name == "gw"
    assert parent.controller_name == "mcp-oauth-gateway.dev/gateway-controller"
    assert conditions(parent.conditions) == {
        "Accepted": (True, "Accepted", "Accepted by Gateway default/gw"),
        "ResolvedRefs": (True, "ResolvedRefs", "All references resolved"),
    }


def test_route_to_a_missing_gateway_and_backend(tmp_path):
    text = (
        BASE.replace("metadata: {name: mcp}", "metadata: {name: mcp, generation: 4}")
        .replace("parentRefs: [{name: gw}]", "parentRefs: [{name: other}, {name: gw}]")
        .replace("backendRefs: [{name: backend}]", "backendRefs: [{name: missing}]")
    )
    route = build(tmp_path, text).statuses["HTTPRoute", "default", "mcp"]
    first, second = route.parents
    assert conditions(first.conditions) == {
        "Accepted": (
            False,
            "NoMatchingParent",
            "spec.parentRefs[0]: Gateway default/other not found",
        ),
        "ResolvedRefs": (
            False,
            "BackendNotFound",
            "spec.rules[0].backendRefs[0]: GatewayBackend default/missing not found",
        ),
    }
    assert conditions(second.conditions)["Accepted"][:2] == (True, "Accepted")
    assert {
        (c.observed_generation, c.last_transition_time)
        for parent in route.parents
        for c in parent.conditions
    } == {(4, AT)}


def test_route_whose_port_matches_no_listener_is_not_accepted(tmp_path):
    text = BASE.replace("parentRefs: [{name: gw}]", "parentRefs: [{name: gw, port: 9090}]")
    result = build(tmp_path, text)
    (parent,) = result.statuses["HTTPRoute", "default", "mcp"].parents
    assert conditions(parent.conditions)["Accepted"] == (
        False,
        "NoMatchingParent",
        "spec.parentRefs[0].port: Gateway default/gw has no listener on port 9090",
    )
    assert result.snapshot.errors == ()


def test_gateway_counts_the_routes_attached_to_each_listener(tmp_path):
    text = BASE.replace(
        "listeners: [{name: http, port: 8080, protocol: HTTP}]",
        "listeners: [{name: http, port: 8080}, {name: alt, port: 8081}]",
    )
    second = (
        text.split("---")[1]
        .replace("name: mcp", "name: other")
        .replace(
            "parentRefs: [{name: gw}]", "parentRefs: [{name: gw, sectionName: alt}, {name: gw}]"
        )
    )
    gateway = build(tmp_path, text + "---" + second).statuses["Gateway", "default", "gw"]
    assert conditions(gateway.conditions) == {
        "Accepted": (True, "Accepted", "Gateway accepted"),
        "Programmed": (True, "Programmed", "Gateway programmed"),
    }
    assert [(lst.name, lst.attached_routes) for lst in gateway.listeners] == [
        ("http", 2),
        ("alt", 2),
    ]
    assert all(
        [c.type for c in lst.conditions] == ["Accepted", "Programmed", "ResolvedRefs"]
        and all(c.status for c in lst.conditions)
        for lst in gateway.listeners
    )


def test_backend_and_service_status(tmp_path):
    cluster_ip = (
        BASE
        + """---
apiVersion: v1
kind: Service
metadata: {name: internal, namespace: tools}
spec: {type: ClusterIP}
"""
    )
    statuses = build(tmp_path, cluster_ip).statuses
    assert conditions(statuses["GatewayBackend", "default", "backend"].conditions) == {
        "Accepted": (True, "Accepted", "Target http://127.0.0.1:9/mcp")
    }
    assert conditions(statuses["Service", "default", "authentik"].conditions) == {
        "Accepted": (True, "Accepted", "Resolves to idp.internal")
    }
    assert conditions(statuses["Service", "tools", "internal"].conditions)["Accepted"][:2] == (
        False,
        "UnsupportedValue",
    )


def test_status_as_dict_has_the_gateway_api_shape(tmp_path):
    statuses = build(tmp_path, BASE + policy()).statuses
    route = statuses["HTTPRoute", "default", "mcp"].as_dict()
    assert route == {
        "parents": [
            {
                "parentRef": {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": "gw",
                },
                "controllerName": "mcp-oauth-gateway.dev/gateway-controller",
                "conditions": [
                    {
                        "type": "Accepted",
                        "status": "True",
                        "reason": "Accepted",
                        "message": "Accepted by Gateway default/gw",
                        "observedGeneration": 1,
                        "lastTransitionTime": AT,
                    },
                    {
                        "type": "ResolvedRefs",
                        "status": "True",
                        "reason": "ResolvedRefs",
                        "message": "All references resolved",
                        "observedGeneration": 1,
                        "lastTransitionTime": AT,
                    },
                ],
            }
        ]
    }
    gateway = statuses["Gateway", "default", "gw"].as_dict()
    assert gateway["listeners"] == [
        {
            "name": "http",
            "attachedRoutes": 1,
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "reason": kind,
                    "message": message,
                    "observedGeneration": 1,
                    "lastTransitionTime": AT,
                }
                for kind, message in (
                    ("Accepted", "Listener accepted"),
                    ("Programmed", "Listener programmed"),
                    ("ResolvedRefs", "References resolved"),
                )
            ],
        }
    ]
    assert set(statuses["GatewayPolicy", "default", "auth"].as_dict()) == {"conditions"}


def test_objects_without_a_source_are_named_by_kind_and_name(tmp_path):
    text = BASE.replace("backendRefs: [{name: backend}]", "backendRefs: [{name: missing}]")
    result = build(tmp_path, text + policy(), sources=False)
    assert result.snapshot.errors == (
        "HTTPRoute default/mcp: spec.rules[0].backendRefs[0]: GatewayBackend default/missing "
        "not found",
    )
    assert result.snapshot.listeners[8080][0].broken == result.snapshot.errors[0]
    assert result.snapshot.policies[0].source == ""


def test_broker_across_processes_needs_shared_state(tmp_path):
    broker = policy().replace(
        "        provider: ", "        authorizationServerMode: Broker\n        provider: "
    )
    objects = load_paths([write(tmp_path, BASE + broker)]).resources
    assert build_from_objects(objects, at="t").snapshot.ok
    shared = Deployment(processes=2, default_redis_url="redis://127.0.0.1:6379/0")
    assert build_from_objects(objects, at="t", deployment=shared).snapshot.ok
    split = build_from_objects(objects, at="t", deployment=Deployment(processes=3)).snapshot
    assert not split.ok
    assert (
        "mcp.broker.redisUrl is required when Broker mode is served by 3 processes"
        in split.policies[0].conditions[0].message
    )
