"""The API server gone in controller mode: a gateway that cannot reach it waits and says so,
and after the API server restarts the watches resume without forgetting what they had listed
(tests/kube_example_support.py says how the example is applied).

Tests in this module share one gateway and run in file order; the API server restarts last.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from kube_example_support import (
    ClusterStack,
    example_cluster,
    own_site,
)
from kube_support import (
    WAIT,
    backend_object,
    backend_ref,
    controller_cmd,
    reference_grant,
    route_object,
)
from support import Process, free_port, wait_for_port, wait_until

NS = "k8s-restarts"
GRANTED_NS = "k8s-restarts-granted"


cluster = example_cluster(own_site(NS))


def test_an_unreachable_api_server_is_waited_for_and_said_so(
    cluster: ClusterStack, logs: Path, tmp_path: Path
) -> None:
    closed = free_port()  # nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        cluster.server.kubeconfig.read_text().replace(
            f"127.0.0.1:{cluster.server.port}", f"127.0.0.1:{closed}"
        )
    )
    admin_port = free_port()
    process = Process("k8s-unreachable", controller_cmd(kubeconfig, admin_port), logs)
    try:
        wait_for_port(admin_port, process)

        def waiting() -> str:
            response = httpx.get(f"http://127.0.0.1:{admin_port}/readyz", timeout=5)
            assert response.status_code == 503
            return " ".join(response.json()["waitingFor"])

        wait_until(lambda: "API server unreachable" in waiting(), WAIT, "the reason to show")
        assert f"127.0.0.1:{closed}" in process.log()
        assert "lost the API server" in process.log()
        assert process.popen.poll() is None
    finally:
        assert process.stop() == 0


def test_watches_resume_after_the_api_server_restarts(cluster: ClusterStack) -> None:
    api = cluster.api
    cluster.server.restart()
    # A change made after the restart reaches the gateway through the resumed watches.
    api.create(backend_object("after-restart", NS, cluster.backend))
    api.wait_conditions("GatewayBackend", NS, "after-restart", {"Accepted": "True"}, 1)
    token = cluster.token()
    assert cluster.initialize(token).status_code == 200
    assert cluster.process.popen.poll() is None
    assert "reading the API server again" in cluster.process.log()


def test_reference_grants_are_not_forgotten_while_the_api_server_restarts(
    cluster: ClusterStack,
) -> None:
    # A starting kube-apiserver answers 404 for CRD kinds for a moment; that once dropped every
    # ReferenceGrant for minutes (a permitted cross-namespace route answered 503). The test
    # server here is kube-apiserver itself, so this guards the whole path; the 404 itself is
    # replayed by
    # tests/unit/kube/test_watch.py::test_a_refused_list_never_forgets_what_was_listed.
    api = cluster.api
    api.create(backend_object("tools", GRANTED_NS, cluster.backend))
    api.create(reference_grant(GRANTED_NS, routes_from=NS))
    parent, ref = {"name": "mcp-gateway"}, backend_ref("tools", GRANTED_NS)
    api.create(route_object("granted", NS, parent, ref, "/granted"))
    wait_until(
        lambda: cluster.initialize(path="/granted").status_code == 200, WAIT, "the route to serve"
    )
    before = cluster.status()["controller"]["snapshotSwaps"]
    cluster.server.restart()
    marker = f"after-grants-{uuid.uuid4().hex[:8]}"
    api.patch("GatewayBackend", GRANTED_NS, "tools", {"metadata": {"labels": {"m": marker}}})
    answers: list[int] = []

    def settled() -> bool:
        answers.append(cluster.initialize(path="/granted").status_code)
        return cluster.status()["controller"]["snapshotSwaps"] > before

    # Until the change made after the restart is built (the watches and lists are back),
    # the permitted route never stops being permitted.
    wait_until(settled, WAIT, "the controller to read the restarted API server")
    answers.append(cluster.initialize(path="/granted").status_code)
    assert set(answers) == {200}, answers
    api.delete("HTTPRoute", NS, "granted")
