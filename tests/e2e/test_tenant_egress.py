"""Tenants on one gateway, on the full API server: a tenant's objects reach its own Services,
another namespace's only when that namespace grants it, and a host it writes itself only when
the operator allows that namespace; never the gateway's own admin port, another tenant's
Service by its DNS name, or the cloud's metadata address.

The platform runs the controller as `deploy/`'s ServiceAccount with `--allow-hosts
team-a=127.0.0.0/8`: every peer of the test listens on loopback, and only team-a may name it
(through its ExternalName Service). Tenants write their objects as themselves (`kubectl --as`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc.jwk import RSAKey

from devcluster.cluster import DevCluster
from kube_support import ACCEPT, INITIALIZE, WAIT
from support import Process, claims_for, free_port, mint, wait_for_port, wait_until
from tenancy_support import (
    Tenant,
    condition,
    external_service,
    inline_policy,
    install,
    installed_controller,
    mcp_backend,
    mcp_route,
    platform_gateway,
    tenant,
)

ISSUER = "https://idp.example/"
PLATFORM = ("platform", "shared")


@dataclass
class World:
    cluster: DevCluster
    team_a: Tenant
    team_b: Tenant
    gateway: str
    admin_port: int
    backend: str
    key: RSAKey
    process: Process

    def call(self, path: str) -> httpx.Response:
        token = mint(self.key, claims_for(ISSUER, "mcp"))
        headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
        return httpx.post(f"{self.gateway}{path}", json=INITIALIZE, headers=headers, timeout=10)

    def answers(self, path: str, status: int, words: str = "") -> httpx.Response:
        """Wait until `path` answers `status` (with `words` in the body)."""
        seen: list[httpx.Response] = []

        def done() -> bool:
            seen[:] = [self.call(path)]
            return seen[0].status_code == status and words in seen[0].text

        try:
            wait_until(done, WAIT, f"{path} to answer {status} {words!r}")
        except AssertionError as exc:
            last = seen[0] if seen else None
            shown = f"{last.status_code} {last.text[:300]}" if last is not None else "nothing"
            raise AssertionError(f"{exc}; last answer: {shown}") from None
        return seen[0]


def shared_listener(port: int) -> list[dict[str, Any]]:
    """The platform's listener every tenant may attach routes to."""
    admitted = {"namespaces": {"from": "All"}}
    return [{"name": "http", "port": port, "protocol": "HTTP", "allowedRoutes": admitted}]


def jwks(key: RSAKey) -> str:
    return json.dumps({"keys": [key.as_dict(private=False)]})


@pytest.fixture(scope="module")
def world(
    kube_apiserver: DevCluster,
    backend: str,
    idp_key: tuple[RSAKey, Path],
    logs: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[World]:
    cluster = kube_apiserver
    install(cluster)
    cluster.kubectl("create", "namespace", PLATFORM[0])
    gateway_port = free_port()
    gateway = platform_gateway(*PLATFORM, shared_listener(gateway_port))
    cluster.kubectl("apply", "-f", "-", stdin=gateway)
    team_a, team_b = tenant(cluster, "team-a", "alice"), tenant(cluster, "team-b", "bob")
    host, port = backend.rsplit(":", 1)
    key = idp_key[0]
    # team-a: its MCP server through a Service of its own (ExternalName: the test's loopback).
    team_a.apply(
        external_service("tools", host, int(port)),
        mcp_backend("tools", {"service": {"name": "tools", "port": int(port)}}),
        mcp_route("mcp", "/a/mcp", "tools", PLATFORM),
        inline_policy("auth", "mcp", ISSUER, jwks(key)),
    )
    team_b.apply(
        mcp_route("mcp", "/b/mcp", "tools", PLATFORM),
        inline_policy("auth", "mcp", ISSUER, jwks(key)),
    )
    process, admin_port = installed_controller(
        cluster, logs, tmp_path_factory.mktemp("sa"), ("team-a=127.0.0.0/8",)
    )
    try:
        wait_for_port(admin_port, process)
        wait_for_port(gateway_port, process, timeout=WAIT)
        yield World(
            cluster,
            team_a,
            team_b,
            f"http://127.0.0.1:{gateway_port}",
            admin_port,
            backend,
            key,
            process,
        )
    finally:
        process.stop()


def accepted(team: Tenant, kind: str, name: str) -> dict[str, Any] | None:
    return condition(team.status(kind, name), "Accepted")


def wait_refused(team: Tenant, kind: str, name: str, *words: str) -> dict[str, Any]:
    """Wait until the object is Accepted=False with every one of `words` in its message."""
    found: list[dict[str, Any] | None] = [None]

    def refused() -> bool:
        found[0] = accepted(team, kind, name)
        return (
            found[0] is not None
            and found[0]["status"] == "False"
            and all(w in found[0]["message"] for w in words)
        )

    wait_until(refused, WAIT, f"{kind} {team.namespace}/{name} Accepted=False naming {words}")
    assert found[0] is not None
    return found[0]


def test_a_tenant_reaches_its_own_service(world: World) -> None:
    answer = world.answers("/a/mcp", 200)
    assert "gateway-test-backend" in answer.text  # the MCP server itself answered
    status = world.team_a.status("gatewaybackend", "tools")
    assert condition(status, "Accepted")["status"] == "True"
    assert condition(status, "ResolvedRefs")["status"] == "True"


@pytest.mark.parametrize(
    ("host", "why"),
    [
        # The gateway's own admin listener: loopback, which team-b may not name.
        ("127.0.0.1", "own admin or health listener"),
        # Another tenant's Service, by its DNS name: no ReferenceGrant would be asked.
        ("tools.team-a.svc.cluster.local", "not a host the gateway's operator lets namespace"),
        ("169.254.169.254", "link-local"),
        ("localhost", "not a host the gateway's operator lets namespace"),
    ],
)
def test_a_host_a_tenant_writes_is_refused_and_its_route_fails_closed(
    world: World, host: str, why: str
) -> None:
    port = world.admin_port if host in ("127.0.0.1", "localhost") else 8000
    world.team_b.apply(mcp_backend("tools", {"static": {"host": host, "port": port}}))
    found = wait_refused(
        world.team_b, "gatewaybackend", "tools", "spec.mcp.targets[0].static.host", host, why
    )
    assert found["reason"] == "RefNotPermitted"
    answer = world.answers("/b/mcp", 503, "static.host")
    assert answer.json()["error"] == "backend_unavailable"
    # The route says why too, where its owner looks.
    parents = world.team_b.status("httproute", "mcp")["parents"]
    resolved = next(c for c in parents[0]["conditions"] if c["type"] == "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "RefNotPermitted")
    # team-a is served all along.
    assert world.call("/a/mcp").status_code == 200


def test_another_tenants_service_needs_its_grant_and_losing_it_revokes(world: World) -> None:
    port = int(world.backend.rsplit(":", 1)[1])
    target = {"service": {"name": "tools", "namespace": "team-a", "port": port}}
    world.team_b.apply(mcp_backend("tools", target))
    found = wait_refused(world.team_b, "gatewaybackend", "tools", "ReferenceGrant")
    assert "needs a ReferenceGrant in namespace team-a" in found["message"]
    world.answers("/b/mcp", 503, "ReferenceGrant")
    # team-b cannot grant itself access to team-a's namespace: RBAC refuses.
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "team-b-tools", "namespace": "team-a"},
        "spec": {
            "from": [
                {"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend", "namespace": "team-b"}
            ],
            "to": [{"group": "", "kind": "Service", "name": "tools"}],
        },
    }
    denied = world.cluster.kubectl(
        "--as", "bob", "apply", "-f", "-", stdin=json.dumps(grant), check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr
    # team-a grants it: team-b reaches team-a's Service (its ExternalName, held to team-a's
    # allowance), and team-b's request goes to team-a's MCP server.
    world.team_a.apply(grant)
    world.answers("/b/mcp", 200)
    world.team_a.kubectl("delete", "referencegrant", "team-b-tools")
    world.answers("/b/mcp", 503, "ReferenceGrant")


@pytest.mark.parametrize("external", ["169.254.169.254", "127.0.0.1", "metadata.google.internal"])
def test_an_external_name_service_is_held_to_its_namespaces_allowance(
    world: World, external: str
) -> None:
    world.team_b.apply(
        external_service("sneaky", external, 80),
        mcp_backend("tools", {"service": {"name": "sneaky", "port": 80}}),
    )
    found = wait_refused(
        world.team_b, "gatewaybackend", "tools", "is of type ExternalName", external
    )
    assert "spec.mcp.targets[0].service" in found["message"]
    world.answers("/b/mcp", 503, "ExternalName")


def test_a_policy_url_the_tenant_may_not_name_refuses_the_policy(world: World) -> None:
    def remote_keys(policy: dict[str, Any]) -> None:
        provider = policy["spec"]["traffic"]["jwtAuthentication"]["providers"][0]
        provider["jwks"] = {"remote": {"url": "http://169.254.169.254/latest/meta-data/keys"}}

    # A backend team-b may use (its own Service, a cluster DNS name): the policy is the problem.
    own = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "tools"},
        "spec": {"ports": [{"port": 80}]},
    }
    world.team_b.apply(
        own,
        mcp_backend("tools", {"service": {"name": "tools", "port": 80}}),
        inline_policy("auth", "mcp", ISSUER, jwks(world.key), remote_keys),
    )
    found = wait_refused(world.team_b, "gatewaypolicy", "auth", "jwks.remote.url")
    assert "link-local" in found["message"]
    world.answers("/b/mcp", 503, "jwks.remote.url")
    assert world.call("/a/mcp").status_code == 200


def test_a_tenant_allowed_loopback_still_never_reaches_the_gateways_admin_listener(
    world: World,
) -> None:
    # team-a may name loopback (the operator's entry), but not the admin port, whose /config
    # lists every tenant's routes and rules.
    world.team_a.apply(
        mcp_backend("admin", {"static": {"host": "127.0.0.1", "port": world.admin_port}}),
        mcp_route("admin", "/a/admin", "admin", PLATFORM),
    )
    found = wait_refused(world.team_a, "gatewaybackend", "admin", "own admin or health listener")
    assert "spec.mcp.targets[0].static.host" in found["message"]
    answer = world.answers("/a/admin", 503, "own admin or health listener")
    assert answer.json()["error"] == "backend_unavailable"  # answered by the gateway itself
    assert world.call("/a/mcp").status_code == 200
