"""Several replicas, one writer, against a real Kubernetes API server: two controller-mode
replicas both serve, only the Lease holder writes status, and when it dies the other takes the
Lease over; a replica that stops gives the Lease up at once.

The replicas serve a GatewayClass, Gateway, route and backend of their own (another controller
name), so nothing else on the session's API server writes the status they write.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kube_example_support import (
    GATEWAY_API_CRDS,
    POLICY_CRDS,
    gateway_api,
)
from kube_support import (
    WAIT,
    Api,
    backend_object,
    backend_ref,
    controller_cmd,
    gateway_class,
    gateway_object,
    listener,
    route_object,
)
from support import Process, free_port, wait_until

FAILOVER_NS = "mcp-e2e-failover"
CONTROLLER = "mcp-oauth-gateway.dev/failover-e2e"
LEASE = "mcp-oauth-gateway"
HOSTS = {"replica-1": "127.0.0.2", "replica-2": "127.0.0.3"}


@pytest.fixture(scope="module", params=GATEWAY_API_CRDS)
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The API server with the project's CRDs, for the replicas to serve from."""
    with gateway_api(request, tmp_path_factory) as server:
        server.apply_crds(POLICY_CRDS)
        yield Api(server)


def failover_objects(port: int, backend: str) -> list[dict[str, Any]]:
    """The replicas' own class, Gateway (listening on `port`), route and backend."""
    return [
        gateway_class("failover", CONTROLLER),
        gateway_object("gw", FAILOVER_NS, "failover", [listener(port)]),
        backend_object("b", FAILOVER_NS, backend),
        route_object("r", FAILOVER_NS, {"name": "gw"}, backend_ref("b")),
    ]


def replica(api: Api, logs: Path, name: str, admin_port: int) -> Process:
    return Process(
        f"k8s-{name}",
        controller_cmd(
            api.server.kubeconfig,
            admin_port,
            *("--host", HOSTS[name], "--controller-name", CONTROLLER),
            *("--lease-namespace", FAILOVER_NS, "--lease-duration", "3"),
        ),
        logs,
        env={"POD_NAME": name},
    )


def controller_state(admin_port: int) -> dict[str, Any]:
    try:
        return httpx.get(f"http://127.0.0.1:{admin_port}/status", timeout=5).json()["controller"]
    except (httpx.HTTPError, KeyError):
        return {}


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
        return True
    except httpx.HTTPError:
        return False


def the_one_leader(admin: dict[str, int]) -> str:
    """The leader as the poll that found exactly one saw it: asking each replica again could
    meet the 3 s Lease between holders (none leading)."""
    leading: list[str] = []

    def one_leads() -> bool:
        leading[:] = [n for n in admin if controller_state(admin[n]).get("leader")]
        return len(leading) == 1

    wait_until(one_leads, WAIT, "exactly one leader")
    return leading[0]


def holder(api: Api) -> str:
    return str(api.get("Lease", FAILOVER_NS, LEASE)["spec"]["holderIdentity"])


def test_two_replicas_serve_one_writes_and_the_other_takes_over(
    api: Api, logs: Path, backend: str
) -> None:
    port = free_port()
    for doc in failover_objects(port, backend):
        api.create(doc)
    admin = {name: free_port() for name in HOSTS}
    processes = {name: replica(api, logs, name, admin[name]) for name in HOSTS}
    try:
        for name in processes:
            url = f"http://{HOSTS[name]}:{port}/"
            wait_until(lambda url=url: _answers(url), WAIT, f"{name} to serve on {url}")
        leader = the_one_leader(admin)
        follower = next(n for n in admin if n != leader)
        assert holder(api) == leader
        assert controller_state(admin[follower])["statusWrites"] == 0
        api.wait_conditions("Gateway", FAILOVER_NS, "gw", {"Programmed": "True"}, 1)

        os.kill(processes[leader].popen.pid, signal.SIGKILL)
        processes[leader].popen.wait(10)
        wait_until(
            lambda: controller_state(admin[follower]).get("leader") is True,
            WAIT,
            f"{follower} to take the Lease over",
        )
        # The next status change is written by the new leader, the only replica left.
        moved = {"spec": {"listeners": [listener(port, hostname="mcp.example")]}}
        generation = api.patch("Gateway", FAILOVER_NS, "gw", moved)
        api.wait_conditions("Gateway", FAILOVER_NS, "gw", {"Programmed": "True"}, generation)
        assert holder(api) == follower

        # A replica that stops (SIGTERM) gives the Lease up at once.
        assert processes[follower].stop() == 0
        assert holder(api) == ""
    finally:
        for process in processes.values():
            process.stop()
