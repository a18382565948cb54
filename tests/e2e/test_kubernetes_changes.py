"""Changes in controller mode against a real Kubernetes API server: a burst of objects settles
into one snapshot swap, and policy changes under load fail no request
(tests/kube_example_support.py says how the example is applied).

Tests in this module share one gateway and run in file order.
"""

from __future__ import annotations

import itertools
import threading
import time

import httpx

from kube_example_support import (
    ClusterStack,
    example_cluster,
    own_site,
)
from kube_support import ACCEPT, INITIALIZE, WAIT, backend_object
from mcp_oauth_gateway.kube.controller import QUIET, SETTLE_AT_MOST
from support import wait_until

NS = "k8s-changes"
TOOLS_NS = "k8s-changes-tools"


cluster = example_cluster(own_site(NS))


def test_a_burst_of_changes_is_one_snapshot_swap(cluster: ClusterStack) -> None:
    api = cluster.api
    swaps = cluster.status()["controller"]["snapshotSwaps"]
    count = 40
    made: list[float] = []  # when each create was answered
    for number in range(count):
        api.create(backend_object(f"burst-{number}", TOOLS_NS, cluster.backend))
        made.append(time.monotonic())
    api.wait_conditions("GatewayBackend", TOOLS_NS, f"burst-{count - 1}", {"Accepted": "True"}, 1)
    # Objects arrive over the watch a few milliseconds apart: they settle into one rebuild
    # (two when a rebuild happened to start just before the last few arrived, three with an
    # earlier change still being built). A burst a loaded machine slowed down settles,
    # by design, into more: one more for each SETTLE_AT_MOST it lasted and for each pause over
    # QUIET between two objects (~0.5 s and none here: the bound is then 3).
    pauses = sum(later - earlier > QUIET for earlier, later in itertools.pairwise(made))
    allowed = 3 + int((made[-1] - made[0]) // SETTLE_AT_MOST) + pauses
    rebuilds = cluster.status()["controller"]["snapshotSwaps"] - swaps
    assert rebuilds <= allowed, (rebuilds, allowed, made[-1] - made[0])


def test_configuration_changes_under_load_fail_no_request(cluster: ClusterStack) -> None:
    api, token = cluster.api, cluster.token()
    stop = threading.Event()
    results: list[int] = []
    errors: list[str] = []

    def client() -> None:
        with httpx.Client(timeout=10) as http:
            while not stop.is_set():
                try:
                    response = http.post(
                        f"{cluster.gateway}/mcp",
                        json=INITIALIZE,
                        headers={**ACCEPT, "Authorization": f"Bearer {token}"},
                    )
                    results.append(response.status_code)
                except httpx.HTTPError as exc:
                    errors.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(results) > 20, WAIT, "the load to start")
        good = api.get("GatewayPolicy", NS, "mcp-authn")["spec"]["traffic"]["authorization"]
        for round_ in range(6):
            rules = list(good["policy"]["matchExpressions"])
            if round_ % 2 == 0:
                rules.append('"users" in jwt.groups')
            changed = {**good, "policy": {"matchExpressions": rules}}
            generation = api.patch(
                "GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": {"authorization": changed}}}
            )
            api.wait_conditions("GatewayPolicy", NS, "mcp-authn", {"Accepted": "True"}, generation)
            served = len(results)
            wait_until(
                lambda served=served: len(results) > served + 10, WAIT, "requests on the new one"
            )
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert errors == []
    failed = [code for code in results if code != 200]
    assert failed == [], f"{len(failed)} of {len(results)} requests failed: {set(failed)}"
