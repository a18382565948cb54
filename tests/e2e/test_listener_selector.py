"""A platform listener shared with chosen tenants, on the full API server: the listener takes
routes from the namespaces its `allowedRoutes.namespaces.selector` selects, reading the labels
of the cluster's Namespace objects as they change; a tenant that may write routes but not label
namespaces cannot get itself selected."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from devcluster.cluster import DevCluster
from kube_support import ACCEPT, INITIALIZE, WAIT
from support import Process, free_port, wait_for_port, wait_until
from tenancy_support import (
    Tenant,
    external_service,
    install,
    installed_controller,
    mcp_backend,
    mcp_route,
    platform_gateway,
    tenant,
)

PLATFORM = ("platform", "shared")


@dataclass
class World:
    cluster: DevCluster
    gold: Tenant
    other: Tenant
    gateway: str
    process: Process

    def status_code(self, path: str) -> int:
        answer = httpx.post(f"{self.gateway}{path}", json=INITIALIZE, headers=ACCEPT, timeout=10)
        return answer.status_code

    def answers(self, path: str, status: int) -> None:
        wait_until(lambda: self.status_code(path) == status, WAIT, f"{path} to answer {status}")


def gold_listener(port: int) -> list[dict[str, Any]]:
    """A listener taking the routes of the namespaces labelled tier=gold."""
    selector = {"matchLabels": {"tier": "gold"}}
    admitted = {"namespaces": {"from": "Selector", "selector": selector}}
    return [{"name": "gold", "port": port, "protocol": "HTTP", "allowedRoutes": admitted}]


@pytest.fixture(scope="module")
def world(
    kube_apiserver: DevCluster, backend: str, logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    cluster = kube_apiserver
    install(cluster)
    cluster.kubectl("create", "namespace", PLATFORM[0])
    port = free_port()
    cluster.kubectl("apply", "-f", "-", stdin=platform_gateway(*PLATFORM, gold_listener(port)))
    gold, other = tenant(cluster, "team-gold", "carol"), tenant(cluster, "team-other", "dave")
    host, backend_port = backend.rsplit(":", 1)
    for team, path in ((gold, "/gold/mcp"), (other, "/other/mcp")):
        team.apply(
            external_service("tools", host, int(backend_port)),
            mcp_backend("tools", {"service": {"name": "tools", "port": int(backend_port)}}),
            mcp_route("mcp", path, "tools", PLATFORM),
        )
    process, admin = installed_controller(
        cluster, logs, tmp_path_factory.mktemp("sa"), ("127.0.0.0/8",)
    )
    try:
        wait_for_port(admin, process)
        wait_for_port(port, process, timeout=WAIT)
        yield World(cluster, gold, other, f"http://127.0.0.1:{port}", process)
    finally:
        process.stop()


def parent_reason(team: Tenant) -> tuple[str, str] | None:
    parents = team.status("httproute", "mcp").get("parents") or []
    for parent in parents:
        for c in parent["conditions"]:
            if c["type"] == "Accepted":
                return c["status"], c["reason"]
    return None


def test_the_listener_takes_the_routes_of_the_namespaces_its_selector_selects(world: World) -> None:
    # No namespace has the label yet: neither route is taken.
    wait_until(
        lambda: parent_reason(world.other) == ("False", "NotAllowedByListeners"),
        WAIT,
        "team-other's route to be refused by the listener",
    )
    assert world.status_code("/gold/mcp") == 404
    # The platform labels team-gold: its route is taken, as the Namespace watch sees it.
    world.cluster.kubectl("label", "namespace", "team-gold", "tier=gold")
    world.answers("/gold/mcp", 200)
    assert parent_reason(world.gold) == ("True", "Accepted")
    assert world.status_code("/other/mcp") == 404
    # The label taken away: the route goes with it.
    world.cluster.kubectl("label", "namespace", "team-gold", "tier-")
    world.answers("/gold/mcp", 404)


def test_a_tenant_cannot_label_its_own_namespace_into_the_selection(world: World) -> None:
    denied = world.cluster.kubectl(
        "--as", "dave", "label", "namespace", "team-other", "tier=gold", check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr
    assert world.status_code("/other/mcp") == 404
