"""Controller mode under what a cluster does to it, with two replicas serving bounded load on
loopback (issue 25, Deliver 4): the leader SIGKILLed, the API server killed and restarted, the
API server hung (SIGSTOP), a policy changed under load. Where the outside run measured no failed
request, none may fail here; how long each recovery takes is measured by
`benchmarks/controller_recovery.py`, never asserted.

Each test starts its own replicas (a GatewayClass of their own, so nothing else here writes the
status they write) against the session's API server.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc.jwk import RSAKey

from kube_support import (
    ACCEPT,
    INITIALIZE,
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
from support import (
    NODE_DIR,
    ROOT,
    Process,
    claims_for,
    free_port,
    mint,
    node,
    wait_for_port,
    wait_until,
)

NS = "robust-e2e"
CONTROLLER = "mcp-oauth-gateway.dev/robust-e2e"
CLIENT_ID = "mcp-public"
HOSTS = ("127.0.0.2", "127.0.0.3")
LEASE_SECONDS = "3"
POLICY_CRDS = sorted((ROOT / "deploy" / "crds").glob("*.yaml"))
# benchmarks/controller_recovery.py sets this: each recovery's measured seconds are appended.
TIMES = os.environ.get("CONTROLLER_RECOVERY_TIMES")


def measured(what: str, since: float) -> None:
    """Record how long a recovery took (for the benchmark; nothing here asserts on it)."""
    if TIMES:
        with open(TIMES, "a", encoding="utf-8") as out:
            out.write(json.dumps({"what": what, "seconds": time.monotonic() - since}) + "\n")


@dataclass
class Cluster:
    api: Api
    server: Any
    port: int
    idp: str
    key: RSAKey
    backend: str
    logs: Path
    replicas: dict[str, tuple[Process, int]] = field(default_factory=dict)

    def token(self) -> str:
        return mint(self.key, claims_for(f"{self.idp}/application/o/mcp/", CLIENT_ID))

    def url(self, name: str) -> str:
        return f"http://{HOSTS[int(name[-1]) - 1]}:{self.port}/mcp"

    def state(self, name: str) -> dict[str, Any]:
        admin = self.replicas[name][1]
        try:
            return httpx.get(f"http://127.0.0.1:{admin}/status", timeout=5).json()["controller"]
        except (httpx.HTTPError, KeyError, ValueError):
            return {}

    def start(self, name: str) -> None:
        admin = free_port()
        host = HOSTS[int(name[-1]) - 1]
        args = ("--host", host, "--controller-name", CONTROLLER, "--lease-namespace", NS)
        command = controller_cmd(
            self.server.kubeconfig, admin, *args, "--lease-duration", LEASE_SECONDS
        )
        process = Process(f"robust-{name}", command, self.logs, env={"POD_NAME": name})
        self.replicas[name] = (process, admin)
        token = self.token()
        wait_until(lambda: _serves(self.url(name), token), WAIT, f"{name} to serve")

    def leader(self) -> str:
        """The one replica holding the Lease (waited for), as the poll that found it saw it:
        asking each replica again could meet the 3 s Lease between holders (none leading)."""
        leading: list[str] = []

        def one_leads() -> bool:
            leading[:] = [n for n in self.replicas if self.state(n).get("leader")]
            return len(leading) == 1

        wait_until(one_leads, WAIT, "exactly one leader")
        return leading[0]

    def stop_all(self) -> None:
        for process, _ in self.replicas.values():
            process.stop()
        self.replicas.clear()


def _serves(url: str, token: str) -> bool:
    try:
        answer = httpx.post(
            url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token}"}, timeout=5
        )
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


def policy(idp: str, gateway: str) -> dict[str, Any]:
    """Provider B's sign-in in front of route `mcp`, for members of the group mcp-agent."""
    issuer = f"{idp}/application/o/mcp/"
    provider = {
        "issuer": issuer,
        "audiences": [CLIENT_ID],
        "jwks": {"remote": {"url": f"{issuer}jwks/"}},
    }
    mcp = {
        "provider": "ProviderB",
        "clientId": CLIENT_ID,
        "resourceMetadata": {"resource": f"{gateway}/mcp"},
    }
    return {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayPolicy",
        "metadata": {"name": "auth", "namespace": NS},
        "spec": {
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "mcp"}
            ],
            "traffic": {
                "jwtAuthentication": {"mode": "Strict", "providers": [provider], "mcp": mcp},
                "authorization": {
                    "action": "Allow",
                    "policy": {"matchExpressions": ['"mcp-agent" in jwt.groups']},
                },
            },
        },
    }


def objects(port: int, idp: str, backend: str, gateway: str) -> list[dict[str, Any]]:
    return [
        gateway_class("robust", CONTROLLER),
        gateway_object("gw", NS, "robust", [listener(port)]),
        backend_object("b", NS, backend),
        route_object("mcp", NS, {"name": "gw"}, backend_ref("b"), "/mcp"),
        policy(idp, gateway),
    ]


@pytest.fixture(scope="module")
def cluster(
    apiserver: Any, logs: Path, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Cluster]:
    apiserver.apply_crds(POLICY_CRDS)
    api = Api(apiserver)
    port, idp_port = free_port(), free_port()
    idp = f"http://127.0.0.1:{idp_port}"
    idp_env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(idp_key[1]),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"http://{HOSTS[0]}:{port}/mcp",
        "SLUG": "mcp",
    }
    idp_process = Process("robust-idp", [node(), str(NODE_DIR / "idp.mjs")], logs, env=idp_env)
    created = objects(port, idp, backend, f"http://{HOSTS[0]}:{port}")
    for doc in created:
        api.create(doc)
    stack = Cluster(api, apiserver, port, idp, idp_key[0], backend, logs)
    try:
        wait_for_port(idp_port, idp_process)
        yield stack
    finally:
        stack.stop_all()
        idp_process.stop()
        # The API server is the session's: later modules must not meet these objects.
        for doc in reversed(created):
            api.delete(doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])


@pytest.fixture
def two(cluster: Cluster) -> Iterator[Cluster]:
    """Two replicas serving, one of them leading."""
    cluster.start("replica-1")
    cluster.start("replica-2")
    try:
        cluster.leader()
        yield cluster
    finally:
        cluster.stop_all()


@dataclass
class Load:
    """Bounded load: a few clients each sending one request after another."""

    results: list[tuple[str, int | str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def failed(self) -> list[tuple[str, int | str]]:
        return [r for r in self.results if r[1] != 200]

    def count(self) -> int:
        return len(self.results)


@contextmanager
def load(urls: list[str], token: str, clients: int = 2) -> Iterator[Load]:
    running = Load()

    def client(url: str) -> None:
        with httpx.Client(timeout=10) as http:
            while not running.stop.is_set():
                try:
                    answer = http.post(
                        url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token}"}
                    )
                    running.results.append((url, answer.status_code))
                except httpx.HTTPError as exc:
                    running.results.append((url, repr(exc)))

    threads = [threading.Thread(target=client, args=(url,)) for url in urls for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: running.count() > 20, WAIT, "the load to start")
        yield running
    finally:
        running.stop.set()
        for thread in threads:
            thread.join(30)


def more(running: Load, than: int) -> None:
    """Until the load has sent requests beyond `than` (what came after a change)."""
    wait_until(lambda: running.count() > than + 20, WAIT, "requests after the change")


def change_policy(cluster: Cluster, extra_rule: str, names: list[str] | None = None) -> None:
    """A CEL change that allows what was allowed (the load must keep succeeding), waited for
    until every replica named (all by default) serves it."""
    swaps = {n: cluster.state(n).get("snapshotSwaps", 0) for n in names or cluster.replicas}
    started = time.monotonic()
    rules = ['"mcp-agent" in jwt.groups', extra_rule]
    cluster.api.patch(
        "GatewayPolicy",
        NS,
        "auth",
        {"spec": {"traffic": {"authorization": {"policy": {"matchExpressions": rules}}}}},
    )
    for name, before in swaps.items():
        wait_until(
            lambda name=name, before=before: cluster.state(name).get("snapshotSwaps", 0) > before,
            WAIT,
            f"{name} to serve the change",
        )
    measured("policy change served by every replica", started)


def test_the_survivor_fails_no_request_while_the_leader_is_killed(two: Cluster) -> None:
    leader = two.leader()
    survivor = next(n for n in two.replicas if n != leader)
    with load([two.url(survivor)], two.token()) as running:
        killed = time.monotonic()
        os.kill(two.replicas[leader][0].popen.pid, signal.SIGKILL)
        two.replicas[leader][0].popen.wait(10)
        wait_until(lambda: two.state(survivor).get("leader") is True, WAIT, "the takeover")
        measured(f"Lease taken over after the leader's SIGKILL ({LEASE_SECONDS} s Lease)", killed)
        change_policy(two, '"users" in jwt.groups || true', [survivor])
        more(running, running.count())
    assert running.failed() == [], f"{len(running.failed())} of {running.count()} failed"


def test_no_request_fails_while_the_api_server_restarts_and_changes_arrive_after(
    two: Cluster,
) -> None:
    urls = [two.url(n) for n in two.replicas]
    with load(urls, two.token()) as running:
        two.server.restart()
        back = time.monotonic()
        # A change made once the server is back reaches both replicas (their watches resume).
        change_policy(two, '"mcp-agent" in jwt.groups || "x" in jwt.groups')
        measured("a change after the API server restarted, on every replica", back)
        more(running, running.count())
    assert running.failed() == [], f"{len(running.failed())} of {running.count()} failed"


def test_a_hung_api_server_costs_no_request_and_the_leader_stops_writing(two: Cluster) -> None:
    leader = two.leader()
    pid = int(two.server.state["apiserver"]["pid"])
    urls = [two.url(n) for n in two.replicas]
    with load(urls, two.token()) as running:
        hung = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            # Within its renew deadline (2/3 of the 3 s Lease), whatever the client's timeouts.
            wait_until(lambda: two.state(leader).get("leader") is False, WAIT, "the step-down")
            measured(f"leader stepped down, API server hung ({LEASE_SECONDS} s Lease)", hung)
            more(running, running.count())
        finally:
            os.kill(pid, signal.SIGCONT)
        two.leader()  # someone leads again once the server answers
        more(running, running.count())
    assert running.failed() == [], f"{len(running.failed())} of {running.count()} failed"
