"""The builder is a pure function of the set of objects: input order and the clock do not show."""

from __future__ import annotations

import dataclasses
import random
from types import MappingProxyType

import pytest

from mcp_oauth_gateway.controlplane import build_from_objects, build_snapshot
from mcp_oauth_gateway.controlplane.cel import CompiledExpression
from mcp_oauth_gateway.resources import load_paths

from .resources_fixture import BASE, policy, write

# Two routes serving the same paths (ties), a missing Gateway and backend (errors), a conflict,
# an invalid policy and a missing target: every decision that could depend on input order.
SECOND_ROUTE = """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: also}
spec:
  parentRefs: [{name: nowhere}, {name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /mcp}}]
      backendRefs: [{name: gone}]
"""
OBJECTS = (
    BASE
    + SECOND_ROUTE
    + policy(name="z")
    + policy(name="a", target="also")
    + policy(name="m", client_id=None)
    + policy(name="q", target="none")
)


def comparable(value: object) -> object:
    """Snapshot contents with compiled CEL programs (compared by identity) replaced by source."""
    if isinstance(value, CompiledExpression):
        return value.source
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            tuple(comparable(getattr(value, f.name)) for f in dataclasses.fields(value)),
        )
    if isinstance(value, dict | MappingProxyType):
        return {key: comparable(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return tuple(comparable(item) for item in value)
    return value


def test_the_same_objects_in_any_order_build_equal_results(tmp_path):
    loaded = load_paths([write(tmp_path, OBJECTS)])
    assert not loaded.errors, loaded.errors
    expected = build_from_objects(loaded.resources, at="T")
    assert expected.snapshot.errors  # the fixture exercises the error paths too
    for seed in range(8):
        objects = list(loaded.resources)
        random.Random(seed).shuffle(objects)
        result = build_from_objects(objects, at="T")
        assert comparable(result.snapshot) == comparable(expected.snapshot)
        assert list(result.snapshot.listeners) == list(expected.snapshot.listeners)
        assert result.statuses == expected.statuses
        assert list(result.statuses) == list(expected.statuses)


def test_equal_matches_are_ordered_by_route_name(tmp_path):
    text = BASE + SECOND_ROUTE.replace(
        "backendRefs: [{name: gone}]", "backendRefs: [{name: backend}]"
    )
    loaded = load_paths([write(tmp_path, text)])
    for objects in (loaded.resources, loaded.resources[::-1]):
        table = build_from_objects(objects, at="T").snapshot.listeners[8080]
        ties = [route.route for route in table if route.match_value == "/mcp"]
        assert ties == ["default/also", "default/mcp"]


def test_errors_are_ordered_by_route_not_by_input(tmp_path):
    text = BASE.replace("backendRefs: [{name: backend}]", "backendRefs: [{name: lost}]")
    loaded = load_paths([write(tmp_path, text + SECOND_ROUTE)])
    for objects in (loaded.resources, loaded.resources[::-1]):
        errors = build_from_objects(objects, at="T").snapshot.errors
        assert [error.split(": ", 1)[1] for error in errors] == [
            "HTTPRoute default/also: spec.parentRefs[0]: Gateway default/nowhere not found",
            "HTTPRoute default/also: spec.rules[0].backendRefs[0]: GatewayBackend default/gone "
            "not found",
            "HTTPRoute default/mcp: spec.rules[0].backendRefs[0]: GatewayBackend default/lost "
            "not found",
        ]


def test_the_time_is_passed_in_not_read(tmp_path):
    loaded = load_paths([write(tmp_path, OBJECTS)])
    result = build_from_objects(loaded.resources, at="2030-01-01T00:00:00Z")
    assert result.snapshot.built_at == "2030-01-01T00:00:00Z"
    stamps = {
        c.last_transition_time
        for status in result.statuses.values()
        for c in (
            *status.conditions,
            *(c for p in status.parents for c in p.conditions),
            *(c for lst in status.listeners for c in lst.conditions),
        )
    }
    assert stamps == {"2030-01-01T00:00:00Z"}


def test_an_object_given_twice_is_refused(tmp_path):
    loaded = load_paths([write(tmp_path, BASE)])
    with pytest.raises(ValueError, match="Gateway default/gw is given twice"):
        build_from_objects([*loaded.resources, loaded.resources[0].resource], at="T")


def test_build_snapshot_puts_load_errors_before_resolution_errors(tmp_path):
    text = BASE.replace("backendRefs: [{name: backend}]", "backendRefs: [{name: gone}]")
    loaded = load_paths([write(tmp_path, text + "---\nkind: Nonsense\n")])
    snapshot = build_snapshot(loaded)
    assert snapshot.errors[: len(loaded.errors)] == tuple(loaded.errors)
    assert snapshot.errors[-1].endswith("GatewayBackend default/gone not found")
    assert snapshot.built_at
