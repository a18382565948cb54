"""A listener takes routes from the namespaces its `allowedRoutes.namespaces.selector` selects,
by their labels (Namespace objects, in a cluster or in files), `kubernetes.io/metadata.name`
being every namespace's own name whatever the objects say."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from mcp_oauth_gateway.controller_name import CONTROLLER_NAME
from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.egress import EgressRules
from mcp_oauth_gateway.resources.label_selector import LabelSelector
from mcp_oauth_gateway.resources.models import KINDS, RouteNamespaces

AT = "2026-01-01T00:00:00Z"


def platform(selector: str) -> str:
    return f"""
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
  listeners:
    - name: tenants
      port: 8080
      allowedRoutes: {{namespaces: {{from: Selector, selector: {selector}}}}}
"""


def route(namespace: str, path: str) -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: {namespace}}}
spec:
  parentRefs: [{{name: gw, namespace: platform}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: b}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: b, namespace: {namespace}}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: 9000}}}}]}}}}
"""


def namespace(name: str, **labels: str) -> str:
    return f"""
---
apiVersion: v1
kind: Namespace
metadata: {{name: {name}, labels: {labels or {}}}}
"""


def build(text: str, cluster: bool = True):
    objects = [
        KINDS[d["apiVersion"], d["kind"]].model_validate(d) for d in yaml.safe_load_all(text) if d
    ]
    deployment = Deployment(cluster=Cluster(egress=EgressRules.of(["127.0.0.0/8"])))
    return build_from_objects(objects, at=AT, deployment=deployment if cluster else None)


def served(result) -> list[str]:
    return sorted(r.route for r in result.snapshot.listeners[8080])


def accepted(result, namespace: str):
    status = result.statuses["HTTPRoute", namespace, "mcp"]
    return {c.type: c for c in status.parents[0].conditions}["Accepted"]


BY_NAME = "{matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [team-a]}]}"


@pytest.mark.parametrize("cluster", [True, False])
def test_a_selector_by_name_takes_the_named_namespaces_routes_alone(cluster):
    result = build(platform(BY_NAME) + route("team-a", "/a") + route("team-b", "/b"), cluster)
    assert served(result) == ["team-a/mcp"]
    refused = accepted(result, "team-b")
    assert (refused.status, refused.reason) == (False, "NotAllowedByListeners")
    assert "namespace team-b is not one of them" in refused.message


def test_a_namespaces_own_name_label_cannot_be_forged_by_its_object():
    # The API server sets kubernetes.io/metadata.name itself; a Namespace object saying
    # otherwise (from files) does not make team-b pass for team-a.
    forged = namespace("team-b", **{"kubernetes.io/metadata.name": "team-a"})
    result = build(platform(BY_NAME) + route("team-b", "/b") + forged)
    assert served(result) == []


def test_other_labels_come_from_the_namespace_objects():
    gold = "{matchLabels: {tier: gold}}"
    text = platform(gold) + route("team-a", "/a") + route("team-b", "/b")
    assert served(build(text)) == []  # no Namespace objects: no label but the name
    labelled = text + namespace("team-a", tier="gold") + namespace("team-b", tier="silver")
    assert served(build(labelled)) == ["team-a/mcp"]


@pytest.mark.parametrize(
    ("labels", "selected"),
    [
        ({}, True),
        ({"a": "1"}, True),
    ],
)
def test_an_empty_selector_selects_every_namespace(labels, selected):
    assert LabelSelector().selects(labels) is selected


@pytest.mark.parametrize(
    ("expression", "labels", "selected"),
    [
        ({"key": "t", "operator": "In", "values": ["a", "b"]}, {"t": "b"}, True),
        ({"key": "t", "operator": "In", "values": ["a"]}, {"t": "b"}, False),
        ({"key": "t", "operator": "In", "values": ["a"]}, {}, False),
        ({"key": "t", "operator": "NotIn", "values": ["a"]}, {}, True),
        ({"key": "t", "operator": "NotIn", "values": ["a"]}, {"t": "a"}, False),
        ({"key": "t", "operator": "Exists"}, {"t": ""}, True),
        ({"key": "t", "operator": "Exists"}, {}, False),
        ({"key": "t", "operator": "DoesNotExist"}, {}, True),
        ({"key": "t", "operator": "DoesNotExist"}, {"t": "x"}, False),
    ],
)
def test_each_operator_reads_labels_as_kubernetes_does(expression, labels, selected):
    selector = LabelSelector.model_validate({"matchExpressions": [expression]})
    assert selector.selects(labels) is selected


@pytest.mark.parametrize(
    "document",
    [
        {"from": "Selector"},
        {"from": "All", "selector": {}},
        {"from": "Selector", "selector": {"matchExpressions": [{"key": "k", "operator": "In"}]}},
        {
            "from": "Selector",
            "selector": {"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]},
        },
    ],
)
def test_a_selector_that_cannot_mean_one_thing_is_refused(document):
    with pytest.raises(ValidationError):
        RouteNamespaces.model_validate(document)
