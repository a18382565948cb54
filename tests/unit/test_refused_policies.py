"""A GatewayPolicy the API server stores but the models refuse (the CRD schema allows more than
the gateway reads) still claims the routes its targetRefs name: they answer 503 rather than be
served without it (issue 25, item 1). The builder sees it as a `RefusedPolicy` stand-in."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.controlplane import build_from_objects
from mcp_oauth_gateway.controlplane.objects import RefusedPolicy
from mcp_oauth_gateway.kube.objects import Invalid, from_server, refused_policy
from mcp_oauth_gateway.resources import load_paths
from unit.resources_fixture import BASE, policy, write

REFUSED = RefusedPolicy("default", "auth", ("mcp",), ("spec.x: not a URL",))


def routes_policy(objects: list) -> object:
    snapshot = build_from_objects(objects, at="T").snapshot
    (route, *_) = snapshot.listeners[8080]
    return route.policy


def test_a_refused_policy_fails_its_route_closed(tmp_path):
    objects = [*load_paths([write(tmp_path, BASE)]).resources, REFUSED]
    compiled = routes_policy(objects)
    assert compiled is not None
    assert compiled.invalid == "GatewayPolicy default/auth is invalid: spec.x: not a URL"


def test_without_the_stand_in_the_route_would_be_served_open(tmp_path):
    # The state of things before: the refused policy simply was not there.
    assert routes_policy(load_paths([write(tmp_path, BASE)]).resources) is None


def test_a_valid_policy_first_by_name_still_governs(tmp_path):
    objects = [
        *load_paths([write(tmp_path, BASE + policy(name="a-valid"))]).resources,
        RefusedPolicy("default", "z-refused", ("mcp",), ("bad",)),
    ]
    compiled = routes_policy(objects)
    assert compiled is not None
    assert (compiled.key, compiled.invalid) == ("default/a-valid", None)


def test_a_refused_policy_first_by_name_makes_the_route_fail_closed(tmp_path):
    objects = [
        *load_paths([write(tmp_path, BASE + policy(name="z-valid"))]).resources,
        RefusedPolicy("default", "a-refused", ("mcp",), ("bad",)),
    ]
    compiled = routes_policy(objects)
    assert compiled is not None
    assert compiled.invalid is not None


def raw_policy(spec: object) -> dict:
    return {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayPolicy",
        "metadata": {"name": "auth", "namespace": "team", "generation": 3},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("refs", "targets"),
    [
        ([{"kind": "HTTPRoute", "name": "mcp"}], ("mcp",)),
        ([{"name": "mcp"}, {"group": "gateway.networking.k8s.io", "name": "b"}], ("mcp", "b")),
        ([{"kind": "Gateway", "name": "gw"}, {"name": 3}, "x", {"name": "ok"}], ("ok",)),
        ("not a list", ()),
    ],
)
def test_the_stand_in_reads_target_refs_leniently(refs, targets):
    raw = raw_policy({"targetRefs": refs, "traffic": {"jwtAuthentication": {"providers": 1}}})
    parsed = from_server(raw)
    assert isinstance(parsed, Invalid)
    stand_in = refused_policy(raw, parsed)
    assert stand_in is not None
    assert (stand_in.key, stand_in.targets) == ("team/auth", targets)
    assert stand_in.problems == parsed.problems


def test_only_gateway_policies_get_a_stand_in():
    raw = {**raw_policy({}), "kind": "GatewayBackend"}
    parsed = from_server(raw)
    assert isinstance(parsed, Invalid)
    assert refused_policy(raw, parsed) is None
