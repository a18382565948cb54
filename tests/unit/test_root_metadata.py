"""Clients that look elsewhere, and browsers that need to see errors (in process, no network):
the root well-known forms answered when a route asks for them and its host has one protected
resource, refused with the reason when it has more; the gateway's own errors readable by a
browser page that a CORS policy of the listener allows."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.snapshot import CompiledRoute
from mcp_oauth_gateway.dataplane.routing import hosts_overlap, shared_hosts
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp

from .resources_fixture import BASE, policy, write

ORIGIN = "http://localhost:6274"
ROOT_MATCHES = """        - path: {type: PathPrefix, value: /mcp}
        - path: {type: Exact, value: /.well-known/oauth-protected-resource}
        - path: {type: Exact, value: /.well-known/oauth-authorization-server}
"""
WITH_ROOT = BASE.replace("        - path: {type: PathPrefix, value: /mcp}\n", ROOT_MATCHES)
SECOND_RESOURCE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: other}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /other}}]
      backendRefs: [{name: backend}]
"""


def client_for(tmp_path, text: str) -> httpx.AsyncClient:
    app = GatewayApp(ControlPlane(build_snapshot(load_paths([write(tmp_path, text)]))))
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw.example:8080"
    )


async def test_the_root_protected_resource_form_is_the_path_form(tmp_path):
    async with client_for(tmp_path, WITH_ROOT + policy()) as client:
        root = await client.get("/.well-known/oauth-protected-resource")
        path = await client.get("/.well-known/oauth-protected-resource/mcp")
    assert root.status_code == 200
    assert root.json() == path.json()
    assert root.json()["resource"] == "http://gw.example/mcp"


async def test_the_root_authorization_server_form_is_served_by_the_same_handler(tmp_path):
    async with client_for(tmp_path, WITH_ROOT + policy()) as client:
        root = await client.get("/.well-known/oauth-authorization-server")
    # Facade: the provider's discovery document, which no test fetched: the same 502 as the
    # path form gives, not a 404.
    assert root.status_code == 502
    assert root.json()["error"] == "temporarily_unavailable"


async def test_a_second_resource_on_the_host_makes_the_root_forms_ambiguous(tmp_path):
    second = policy(name="other-auth", target="other").replace(
        "resource: http://gw.example/mcp", "resource: http://gw.example/other"
    )
    text = WITH_ROOT + SECOND_RESOURCE + policy() + second
    async with client_for(tmp_path, text) as client:
        root = await client.get("/.well-known/oauth-protected-resource")
        path = await client.get("/.well-known/oauth-protected-resource/mcp")
    assert root.status_code == 404
    assert root.json()["error_description"] == (
        "/.well-known/oauth-protected-resource would be ambiguous: this host serves more than "
        "one protected resource (/mcp, /other); ask for "
        "/.well-known/oauth-protected-resource/mcp instead"
    )
    assert path.status_code == 200


async def test_an_unrouted_path_answers_a_browser_it_can_read(tmp_path):
    async with client_for(tmp_path, BASE + policy()) as client:
        response = await client.get(
            "/.well-known/oauth-authorization-server", headers={"Origin": ORIGIN}
        )
        preflight = await client.options(
            "/.well-known/oauth-authorization-server",
            headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"},
        )
    assert response.status_code == 404
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert response.headers["vary"] == "Origin"
    # The preflight passes, so the browser goes on to read the 404 instead of failing.
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ORIGIN


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},  # not allowed by any policy of the listener
        {},  # not a cross-origin request
    ],
)
async def test_errors_carry_cors_headers_only_for_allowed_origins(tmp_path, headers):
    text = BASE.replace('allowOrigins: ["*"]', f"allowOrigins: [{ORIGIN}]")
    async with client_for(tmp_path, text + policy()) as client:
        response = await client.get("/nowhere", headers=headers)
    assert response.status_code == 404
    assert "access-control-allow-origin" not in response.headers


async def test_a_refused_request_is_readable_by_an_allowed_page(tmp_path):
    async with client_for(tmp_path, BASE + policy()) as client:
        response = await client.post(
            "/mcp",
            json={},
            headers=[("Origin", ORIGIN), ("Mcp-Method", "a"), ("Mcp-Method", "b")],
        )
        doubled = await client.get("/nowhere", headers=[("Origin", ORIGIN), ("Origin", ORIGIN)])
    assert response.status_code == 400
    assert response.headers["access-control-allow-origin"] == ORIGIN
    # Two Origin headers are refused, and with no CORS headers: which one would be echoed?
    assert doubled.status_code == 400
    assert "access-control-allow-origin" not in doubled.headers


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ((), ("a.example",), True),
        (("a.example",), ("A.example",), True),
        (("a.example",), ("b.example",), False),
        (("*.example",), ("b.example",), True),
    ],
)
def test_hosts_overlap(a, b, overlap):
    assert hosts_overlap(a, b) is overlap


def test_only_routes_with_a_protected_resource_are_counted(tmp_path):
    snapshot = build_snapshot(load_paths([write(tmp_path, WITH_ROOT + SECOND_RESOURCE + policy())]))
    routes: list[CompiledRoute] = [r for rs in snapshot.listeners.values() for r in rs]
    assert {r.route for r in routes} == {"default/mcp", "default/other"}
    assert shared_hosts(snapshot.listeners) == {}


def _protected(i: int, hostnames: tuple[str, ...], path: str) -> SimpleNamespace:
    """What `shared_hosts` reads of a route rule with a protected resource."""
    mcp = SimpleNamespace(mcp_path=path)
    return SimpleNamespace(
        route=f"ns/r{i}", rule=0, hostnames=hostnames, policy=SimpleNamespace(key=f"p{i}", mcp=mcp)
    )


def _pairwise(routes: list[SimpleNamespace]) -> dict[tuple[str, int], set[tuple[str, str]]]:
    """Every pair compared: the other resources each rule shares a host with."""
    out = {}
    for route in routes:
        mine = (route.policy.key, route.policy.mcp.mcp_path)
        others = {
            (o.policy.key, o.policy.mcp.mcp_path)
            for o in routes
            if (o.policy.key, o.policy.mcp.mcp_path) != mine
            and hosts_overlap(route.hostnames, o.hostnames)
        }
        if others:
            out[(route.route, route.rule)] = others
    return out


HOSTNAMES = [(), ("a.example",), ("A.example", "b.example"), ("b.example",), ("*.example",)]


@given(st.lists(st.tuples(st.sampled_from(HOSTNAMES), st.sampled_from(["/m", "/n"])), max_size=9))
def test_grouping_by_host_finds_what_comparing_every_pair_finds(made):
    routes = [_protected(i, hosts, path) for i, (hosts, path) in enumerate(made)]
    expected = _pairwise(routes)
    shared = shared_hosts({8080: routes})  # type: ignore[dict-item]
    assert shared.keys() == expected.keys()
    for key, shown in shared.items():
        names, more = (shown[:-1], int(shown[-1].split()[0])) if "more" in shown[-1] else (shown, 0)
        assert set(names) <= {path for _, path in expected[key]}
        assert len(names) + more == len(expected[key])


def test_thousands_of_resources_on_one_host_name_a_few_and_count_the_rest():
    routes = [_protected(i, ("mcp.example",), f"/t{i:04d}") for i in range(5000)]
    shared = shared_hosts({8080: routes})  # type: ignore[dict-item]
    assert len(shared) == 5000
    assert shared[("ns/r0", 0)] == ("/t0001", "/t0002", "/t0003", "4996 more")
    assert shared[("ns/r2", 0)] == ("/t0000", "/t0001", "/t0003", "4996 more")
