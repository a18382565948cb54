"""The controller's cache and status decisions, on objects shaped as an API server returns them
(server-filled metadata, defaults, an existing status, another controller's entries)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from mcp_oauth_gateway.controller_name import CONTROLLER_NAME
from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.builder import BuildResult
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.controlplane.egress import EgressRules
from mcp_oauth_gateway.kube.cache import ObjectCache
from mcp_oauth_gateway.kube.kinds import BY_KIND, HTTP_ROUTE, WATCHED
from mcp_oauth_gateway.kube.objects import Invalid, from_server
from mcp_oauth_gateway.kube.writer import StatusUpdate, updates

AT = "2026-01-01T00:00:00Z"
# The objects name loopback hosts, as an operator allows on a laptop (serve --allow-hosts).
LOOPBACK = Cluster(egress=EgressRules.of(["127.0.0.0/8"]))
THEIRS = "example.com/other-controller"
OBJECTS = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: mcp}}
spec: {{controllerName: {CONTROLLER_NAME}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: apps}}
spec:
  gatewayClassName: mcp
  listeners:
    - name: http
      port: 8080
      protocol: HTTP
      allowedRoutes:
        namespaces: {{from: Same}}
        kinds: [{{group: gateway.networking.k8s.io, kind: HTTPRoute}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: apps}}
spec:
  parentRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
      backendRefs:
        - {{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend, weight: 1}}
status:
  parents:
    - parentRef: {{name: elsewhere}}
      controllerName: {THEIRS}
      conditions: []
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend, namespace: apps}}
spec:
  mcp:
    targets: [{{name: t, static: {{host: 127.0.0.1, port: 8000}}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: auth, namespace: apps}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      mode: Strict
      providers:
        - issuer: http://127.0.0.1:9000/
          audiences: [mcp]
          jwks: {{remote: {{url: http://127.0.0.1:9000/jwks}}}}
"""


def server_objects(text: str = OBJECTS) -> list[dict[str, Any]]:
    """The documents with what an API server adds to every object."""
    out = []
    for number, document in enumerate(yaml.safe_load_all(text), start=1):
        metadata = document["metadata"]
        metadata.update(
            uid=f"uid-{number}",
            resourceVersion=str(100 + number),
            generation=2,
            creationTimestamp="2026-01-01T00:00:00Z",
            managedFields=[{"manager": "kubectl", "operation": "Apply"}],
        )
        out.append(document)
    return out


def filled(objects: list[dict[str, Any]]) -> ObjectCache:
    cache = ObjectCache(WATCHED)
    for kind in WATCHED:
        items = [o for o in objects if o["kind"] == kind.kind]
        cache.replace_all(kind, items, "1")
    return cache


def build(cache: ObjectCache) -> BuildResult:
    return build_from_objects(cache.resources(), at=AT, deployment=Deployment(cluster=LOOPBACK))


def write(cache: ObjectCache, pending: list[StatusUpdate]) -> None:
    """What the API server does with a status PUT, as the watch then reports it."""
    for update in pending:
        raw = copy.deepcopy(update.raw)
        raw["status"] = update.status
        cache.apply(update.kind, "MODIFIED", raw)


def conditions(entries: list[dict[str, Any]]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in entries}


def test_server_filled_fields_are_accepted() -> None:
    for raw in server_objects():
        assert not isinstance(from_server(raw), Invalid), raw["kind"]


def test_status_is_written_once_and_then_left_alone() -> None:
    cache = filled(server_objects())
    result = build(cache)
    control = ControlPlane(result.snapshot)
    pending = updates(result, cache, control.conditions, CONTROLLER_NAME, AT)
    labels = sorted(u.label for u in pending)
    assert labels == [
        "Gateway apps/gw",
        "GatewayBackend apps/backend",
        "GatewayClass mcp",
        "GatewayPolicy apps/auth",
        "HTTPRoute apps/mcp",
    ]
    by_label = {u.label: u.status for u in pending}
    policy = by_label["GatewayPolicy apps/auth"]
    assert conditions(policy["conditions"])["Accepted"] == "True"
    assert conditions(policy["conditions"])["Attached"] == "True"
    assert [c["observedGeneration"] for c in policy["conditions"]] == [2, 2, 2]
    (ancestor,) = policy["ancestors"]
    assert ancestor["ancestorRef"] == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": "apps",
        "name": "gw",
    }
    assert ancestor["controllerName"] == CONTROLLER_NAME
    route = by_label["HTTPRoute apps/mcp"]["parents"]
    assert [p["controllerName"] for p in route] == [THEIRS, CONTROLLER_NAME]
    before = cache.content_version
    write(cache, pending)
    assert cache.content_version == before  # status writes do not count as content changes
    assert cache.version == before + len(pending)
    later = "2026-01-02T00:00:00Z"
    again = build_from_objects(cache.resources(), at=later, deployment=Deployment(cluster=LOOPBACK))
    assert updates(again, cache, control.conditions, CONTROLLER_NAME, later) == []


def test_an_invalid_object_gets_accepted_false_and_nothing_else_breaks() -> None:
    objects = server_objects()
    policy = next(o for o in objects if o["kind"] == "GatewayPolicy")
    policy["spec"]["traffic"]["jwtAuthentication"]["mode"] = "Sometimes"
    cache = filled(objects)
    result = build(cache)
    pending = updates(result, cache, ControlPlane(result.snapshot).conditions, CONTROLLER_NAME, AT)
    by_label = {u.label: u.status for u in pending}
    (accepted,) = by_label["GatewayPolicy apps/auth"]["conditions"]
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
    assert "spec.traffic.jwtAuthentication.mode" in accepted["message"]
    assert accepted["observedGeneration"] == 2
    # The route the policy meant to protect is served without it: the snapshot says so.
    assert "HTTPRoute apps/mcp" in by_label


def test_a_route_moved_to_another_controller_loses_only_our_entries() -> None:
    cache = filled(server_objects())
    result = build(cache)
    control = ControlPlane(result.snapshot)
    write(cache, updates(result, cache, control.conditions, CONTROLLER_NAME, AT))
    route = copy.deepcopy(cache.raw(HTTP_ROUTE, "apps", "mcp"))
    assert route is not None
    route["spec"]["parentRefs"] = [{"name": "elsewhere"}]
    route["metadata"]["generation"] = 3
    cache.apply(HTTP_ROUTE, "MODIFIED", route)
    moved = build(cache)
    pending = updates(moved, cache, control.conditions, CONTROLLER_NAME, AT)
    (update,) = [u for u in pending if u.kind is HTTP_ROUTE]
    assert [p["controllerName"] for p in update.status["parents"]] == [THEIRS]


def test_cache_counts_content_changes_not_status_or_bookkeeping() -> None:
    cache = filled(server_objects())
    start = cache.content_version
    policy = copy.deepcopy(cache.raw(BY_KIND["GatewayPolicy"], "apps", "auth"))
    assert policy is not None
    policy["metadata"]["resourceVersion"] = "999"
    policy["status"] = {"conditions": []}
    cache.apply(BY_KIND["GatewayPolicy"], "MODIFIED", copy.deepcopy(policy))
    assert cache.content_version == start
    policy["spec"]["traffic"]["jwtAuthentication"]["mode"] = "Permissive"
    cache.apply(BY_KIND["GatewayPolicy"], "MODIFIED", policy)
    assert cache.content_version == start + 1
    cache.apply(BY_KIND["GatewayPolicy"], "DELETED", policy)
    assert cache.content_version == start + 2
    assert cache.raw(BY_KIND["GatewayPolicy"], "apps", "auth") is None
    # A relist that misses an object (deleted while the watch was down) removes it.
    cache.replace_all(HTTP_ROUTE, [], "5")
    assert cache.raw(HTTP_ROUTE, "apps", "mcp") is None


def test_an_optional_kind_the_server_lacks_counts_as_synced_but_unavailable() -> None:
    cache = ObjectCache(WATCHED)
    for kind in WATCHED:
        if kind.optional:
            cache.unavailable(kind, "not served")
        else:
            assert not cache.synced
            cache.replace_all(kind, [], "1")
    assert cache.synced
    assert not cache.available(BY_KIND["Service"])
    assert cache.waiting() == []


def test_a_route_whose_backend_the_server_defaulted_to_a_service_says_what_to_write() -> None:
    objects = server_objects()
    route = next(o for o in objects if o["kind"] == "HTTPRoute")
    # What the API server stores for `backendRefs: [{name: backend}]`.
    route["spec"]["rules"][0]["backendRefs"] = [
        {"group": "", "kind": "Service", "name": "backend", "weight": 1}
    ]
    cache = filled(objects)
    result = build(cache)
    pending = updates(result, cache, ControlPlane(result.snapshot).conditions, CONTROLLER_NAME, AT)
    (update,) = [u for u in pending if u.label == "HTTPRoute apps/mcp"]
    ours = [p for p in update.status["parents"] if p["controllerName"] == CONTROLLER_NAME]
    (accepted,) = ours[0]["conditions"]
    assert (accepted["type"], accepted["status"]) == ("Accepted", "False")
    assert "spec.rules[0].backendRefs[0]" in accepted["message"]
    assert "kind: GatewayBackend" in accepted["message"]
    # Another controller's entry stays.
    assert [p["controllerName"] for p in update.status["parents"]] == [THEIRS, CONTROLLER_NAME]


def test_an_invalid_gateway_of_our_class_is_neither_accepted_nor_programmed() -> None:
    objects = server_objects()
    gateway = next(o for o in objects if o["kind"] == "Gateway")
    gateway["spec"]["listeners"][0]["protocol"] = "UDP"
    other = copy.deepcopy(gateway)
    other["metadata"]["name"] = "not-ours"
    other["spec"]["gatewayClassName"] = "someone-else"
    cache = filled([*objects, other])
    result = build(cache)
    pending = updates(result, cache, ControlPlane(result.snapshot).conditions, CONTROLLER_NAME, AT)
    by_label = {u.label: u.status for u in pending}
    assert conditions(by_label["Gateway apps/gw"]["conditions"]) == {
        "Accepted": "False",
        "Programmed": "False",
    }
    assert "spec.listeners[0].protocol" in by_label["Gateway apps/gw"]["conditions"][0]["message"]
    assert "Gateway apps/not-ours" not in by_label


def test_a_relist_keeps_the_model_of_every_object_it_finds_unchanged() -> None:
    objects = server_objects()
    cache = filled(objects)
    before = {type(r).__name__: r for r in cache.resources()}
    relisted = copy.deepcopy(objects)
    for raw in relisted:
        raw["metadata"]["resourceVersion"] = "500"  # bookkeeping the models do not read
        if raw["kind"] == "GatewayBackend":
            raw["spec"]["mcp"]["targets"][0]["static"]["port"] = 8001
        if raw["kind"] == "HTTPRoute":  # deleted and created again while the watch was away
            raw["metadata"]["creationTimestamp"] = "2026-02-01T00:00:00Z"
    for kind in WATCHED:
        cache.replace_all(kind, [o for o in relisted if o["kind"] == kind.kind], "2")
    after = {type(r).__name__: r for r in cache.resources()}
    changed = {name for name, model in after.items() if model is not before[name]}
    assert changed == {"GatewayBackend", "HTTPRoute"}
