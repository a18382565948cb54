"""Controller mode against a real Kubernetes API server (kube-apiserver v1.36.4 + etcd, the
session's `apiserver`: admin credentials, namespaces used without being created).

The spec's example (examples/kubernetes) is applied with local addresses: the gateway's listener
on a free port, the MCP backend and the OpenID provider on loopback, and the provider's keys
fetched from `jwks.remote.url` (no kube-proxy or DNS runs: a Service name would send the gateway
to DNS).

Tests in this module share one gateway and run in file order; the API server restart is last.
"""

from __future__ import annotations

import copy
import itertools
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from joserfc.jwk import RSAKey

from kube_support import ACCEPT, INITIALIZE, WAIT, Api, controller_cmd
from mcp_oauth_gateway.kube.controller import QUIET, SETTLE_AT_MOST
from node_clients import run_ts_client
from support import (
    NODE_DIR,
    ROOT,
    Process,
    claims_for,
    deploy_rbac_rules,
    free_port,
    mint,
    node,
    wait_for_port,
    wait_until,
)
from xdist_scheduling import APISERVER

# Every test reaches the session's API server by parameter (`gateway_api`): its xdist group.
pytestmark = APISERVER

NS = "mcp-e2e"
TOOLS_NS = "mcp-e2e-tools"
FAILOVER_NS = "mcp-e2e-failover"
CLIENT_ID = "mcp-public"
EXAMPLE = ROOT / "examples" / "kubernetes"
POLICY_CRDS = sorted((ROOT / "deploy" / "crds").glob("*.yaml"))


def example_objects(gateway_port: int, idp: str, backend: str, gateway: str) -> list[dict]:
    """examples/kubernetes with local addresses, in namespace NS (no Service, no grant)."""
    docs = []
    for path in sorted(EXAMPLE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            # The test server serves no core kinds (no Namespaces) and needs no grant here.
            if doc and doc["kind"] not in ("ReferenceGrant", "Namespace"):
                docs.append(doc)
    for doc in docs:
        if doc["metadata"].get("namespace") == "mcp":
            doc["metadata"]["namespace"] = NS
        if doc["kind"] == "Gateway":
            doc["spec"]["listeners"][0]["port"] = gateway_port
        elif doc["kind"] == "HTTPRoute":
            doc["spec"]["parentRefs"][0]["namespace"] = NS
        elif doc["kind"] == "GatewayBackend":
            # This server has no Services: the backend by its loopback address, which the
            # controller is allowed to reach (kube_support.controller_cmd).
            host, port = backend.rsplit(":", 1)
            target = doc["spec"]["mcp"]["targets"][0]
            target["static"] = {
                "host": host,
                "port": int(port),
                "path": target.pop("service")["path"],
            }
        elif doc["kind"] == "GatewayPolicy":
            jwt = doc["spec"]["traffic"]["jwtAuthentication"]
            jwt["providers"][0]["issuer"] = f"{idp}/application/o/mcp/"
            jwt["providers"][0]["jwks"] = {"remote": {"url": f"{idp}/application/o/mcp/jwks/"}}
            jwt["mcp"]["resourceMetadata"]["resource"] = f"{gateway}/mcp"
    return docs


@dataclass
class ClusterStack:
    api: Api
    server: Any
    gateway: str
    admin: str
    idp: str
    key: RSAKey
    process: Process
    gateway_port: int
    backend: str

    def token(self, **overrides: object) -> str:
        claims = claims_for(f"{self.idp}/application/o/mcp/", CLIENT_ID)
        claims.update(overrides)
        return mint(self.key, claims)

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.admin}/status", timeout=5).json()

    def initialize(self, token: str | None = None, path: str = "/mcp") -> httpx.Response:
        headers = dict(ACCEPT)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.post(f"{self.gateway}{path}", json=INITIALIZE, headers=headers, timeout=10)


@pytest.fixture(
    scope="module",
    params=["project-crds", pytest.param("official-crds", marks=pytest.mark.contracts)],
)
def gateway_api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """An API server serving Gateway API CRDs: the project's own (what `make test` uses), or
    the official v1.6.1 experimental ones from CONTRACTS_DIR (`make test-contracts`), on a
    server of their own since both define the same kinds."""
    if request.param == "project-crds":
        yield request.getfixturevalue("apiserver")
        return
    from contracts import CONTRACTS, require
    from devcluster.cluster import DevCluster

    official = sorted((CONTRACTS / "gateway-api-v1.6.1-experimental").glob("*.yaml"))
    require(CONTRACTS / "gateway-api-v1.6.1-experimental" / "httproutes.yaml")
    server = DevCluster.start(tmp_path_factory.mktemp("apiserver-official"), any_namespace=True)
    try:
        server.apply_crds(official)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(
    gateway_api: Any,
    logs: Path,
    idp_key: tuple[RSAKey, Path],
    backend: str,
) -> Iterator[ClusterStack]:
    """The example applied to the API server and a gateway serving it in controller mode."""
    apiserver = gateway_api
    apiserver.apply_crds(POLICY_CRDS)
    api = Api(apiserver)
    gateway_port, idp_port, admin_port = free_port(), free_port(), free_port()
    gateway, idp = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{idp_port}"
    idp_env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(idp_key[1]),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"{gateway}/mcp",
        "SLUG": "mcp",
    }
    idp_process = Process("k8s-idp", [node(), str(NODE_DIR / "idp.mjs")], logs, env=idp_env)
    for doc in example_objects(gateway_port, idp, backend, gateway):
        api.create(doc)
    process = Process(
        "k8s-gateway-a",
        controller_cmd(apiserver.kubeconfig, admin_port, "--lease-namespace", NS),
        logs,
        # As a Deployment gives a mounted Secret: env.valueFrom.secretKeyRef.
        env={"POD_NAME": "replica-a", "BACKEND_API_KEY": BACKEND_API_KEY},
    )
    try:
        wait_for_port(idp_port, idp_process)
        wait_for_port(admin_port, process)
        stack = ClusterStack(
            api,
            apiserver,
            gateway,
            f"http://127.0.0.1:{admin_port}",
            idp,
            idp_key[0],
            process,
            gateway_port,
            backend,
        )
        wait_for_port(gateway_port, process, timeout=WAIT)
        yield stack
    finally:
        process.stop()
        idp_process.stop()


def test_status_comes_up_true_with_the_observed_generation(cluster: ClusterStack) -> None:
    api = cluster.api
    policy = api.get("GatewayPolicy", NS, "mcp-authn")
    generation = policy["metadata"]["generation"]
    every = {"Accepted": "True", "Attached": "True", "ResolvedRefs": "True"}
    conditions = api.wait_conditions("GatewayPolicy", NS, "mcp-authn", every, generation)
    assert conditions["Accepted"]["reason"] == "Valid"
    status = api.get("GatewayPolicy", NS, "mcp-authn")["status"]
    (ancestor,) = status["ancestors"]
    assert ancestor["ancestorRef"] == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": NS,
        "name": "mcp-gateway",
    }
    assert ancestor["controllerName"] == "mcp-oauth-gateway.dev/gateway-controller"
    assert {c["type"]: c["status"] for c in ancestor["conditions"]} == every

    api.wait_conditions("GatewayClass", None, "mcp-oauth-gateway", {"Accepted": "True"}, 1)
    gateway = api.wait_conditions(
        "Gateway", NS, "mcp-gateway", {"Accepted": "True", "Programmed": "True"}, 1
    )
    assert gateway["Programmed"]["observedGeneration"] == 1
    (listener,) = api.get("Gateway", NS, "mcp-gateway")["status"]["listeners"]
    assert listener["name"] == "http"
    assert listener["attachedRoutes"] == 1
    assert {c["type"]: c["status"] for c in listener["conditions"]}["Programmed"] == "True"
    (parent,) = api.get("HTTPRoute", NS, "mcp")["status"]["parents"]
    assert parent["controllerName"] == "mcp-oauth-gateway.dev/gateway-controller"
    assert parent["parentRef"]["name"] == "mcp-gateway"
    assert {c["type"]: c["status"] for c in parent["conditions"]} == {
        "Accepted": "True",
        "ResolvedRefs": "True",
    }
    api.wait_conditions("GatewayBackend", NS, "mcp-backend", {"Accepted": "True"}, 1)
    ready = httpx.get(f"{cluster.admin}/readyz", timeout=5)
    assert ready.status_code == 200, ready.text


def test_status_is_written_only_when_it_changes(cluster: ClusterStack) -> None:
    before = cluster.api.get("GatewayPolicy", NS, "mcp-authn")
    writes = cluster.status()["controller"]["statusWrites"]
    # Counted before the change: its rebuild comes 0.1 s after it arrives, which a count read
    # after the patch on a loaded machine could already include (then no rebuild is "next").
    swaps = cluster.status()["controller"]["snapshotSwaps"]
    # An unrelated change (a label: generation unchanged) rebuilds nothing worth writing.
    cluster.api.patch("GatewayBackend", NS, "mcp-backend", {"metadata": {"labels": {"a": "b"}}})
    wait_until(lambda: cluster.status()["controller"]["snapshotSwaps"] > swaps, WAIT, "a rebuild")
    after = cluster.api.get("GatewayPolicy", NS, "mcp-authn")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert cluster.status()["controller"]["statusWrites"] == writes


def test_a_real_mcp_client_signs_in_through_controller_mode(cluster: ClusterStack) -> None:
    report = run_ts_client(f"{cluster.gateway}/mcp", "alice")
    assert report["ok"], report
    assert report["clientId"] == CLIENT_ID
    assert report["authorizationUrl"].startswith(f"{cluster.idp}/application/o/mcp/authorize/")


def test_an_invalid_cel_rule_fails_closed_and_fixing_it_restores_service(
    cluster: ClusterStack,
) -> None:
    api, token = cluster.api, cluster.token()
    assert cluster.initialize(token).status_code == 200
    good = api.get("GatewayPolicy", NS, "mcp-authn")["spec"]["traffic"]["authorization"]
    broken = copy.deepcopy(good)
    broken["policy"]["matchExpressions"] = ['jwt.groups.exists(g, g == "mcp-agent"']
    generation = api.patch(
        "GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": {"authorization": broken}}}
    )
    conditions = api.wait_conditions(
        "GatewayPolicy", NS, "mcp-authn", {"Accepted": "False"}, generation
    )
    assert conditions["Accepted"]["reason"] == "Invalid"
    assert (
        "spec.traffic.authorization.policy.matchExpressions[0]" in conditions["Accepted"]["message"]
    )
    wait_until(
        lambda: cluster.initialize(token).status_code == 503, WAIT, "the route to fail closed"
    )
    refused = cluster.initialize(token)
    assert refused.json()["error"] == "policy_invalid"
    generation = api.patch(
        "GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": {"authorization": good}}}
    )
    api.wait_conditions(
        "GatewayPolicy", NS, "mcp-authn", {"Accepted": "True", "Attached": "True"}, generation
    )
    wait_until(lambda: cluster.initialize(token).status_code == 200, WAIT, "service to return")


@pytest.mark.parametrize(
    "refused",
    [
        # Past the schema's pattern, refused by the WHATWG URL parser only.
        {"jwtAuthentication": {"providers": [{"jwks": {"remote": {"url": "http://a:99999/"}}}]}},
        {"jwtAuthentication": {"mcp": {"resourceMetadata": {"resource": "http://a%zz/mcp"}}}},
    ],
    ids=["jwks url", "resource"],
)
def test_a_policy_the_api_server_stores_but_the_gateway_refuses_fails_its_route_closed(
    cluster: ClusterStack, refused: dict[str, Any]
) -> None:
    # The CRD allows more than the models read: such a policy was dropped from the build and
    # its route served without it (200 without a token).
    api = cluster.api
    assert cluster.initialize(None).status_code == 401
    good = api.get("GatewayPolicy", NS, "mcp-authn")["spec"]["traffic"]
    broken = merge(copy.deepcopy(good), refused)
    generation = api.patch("GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": broken}})
    try:
        api.wait_conditions("GatewayPolicy", NS, "mcp-authn", {"Accepted": "False"}, generation)
        wait_until(
            lambda: cluster.initialize(None).status_code == 503, WAIT, "the route to fail closed"
        )
        for token in (None, cluster.token()):
            answer = cluster.initialize(token)
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "policy_invalid"
    finally:
        api.patch("GatewayPolicy", NS, "mcp-authn", {"spec": {"traffic": good}})
    wait_until(lambda: cluster.initialize(None).status_code == 401, WAIT, "the policy to return")


@pytest.mark.parametrize(
    "value", ["not-a-url", "ftp://idp.example/jwks", "http://user:pw@idp.example/jwks"]
)
def test_the_api_server_refuses_a_url_the_gateway_would(cluster: ClusterStack, value: str) -> None:
    # The CRD says what the models say: the report's `not-a-url` is not even stored.
    api = cluster.api
    traffic = api.get("GatewayPolicy", NS, "mcp-authn")["spec"]["traffic"]
    broken = merge(
        copy.deepcopy(traffic),
        {"jwtAuthentication": {"providers": [{"jwks": {"remote": {"url": value}}}]}},
    )
    answer = api.server.request(
        "PATCH",
        api.path("GatewayPolicy", NS, "mcp-authn"),
        {"spec": {"traffic": broken}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 422, answer.text
    assert "jwks.remote.url" in answer.text


def merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`change` laid over `base`; lists of objects are merged item by item (the first one)."""
    for key, value in change.items():
        current = base.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merge(current, value)
        elif isinstance(value, list) and isinstance(current, list) and current:
            merge(current[0], value[0])
        else:
            base[key] = value
    return base


BACKEND_API_KEY = "k8s-backend-api-key-7"


def passed_through(cluster: ClusterStack, token: str, mark: str) -> bool:
    """One call marked `mark`; whether the backend saw it with the caller's own token."""
    headers = {**ACCEPT, "Authorization": f"Bearer {token}", "Mcp-Param-Mark": mark}
    httpx.post(f"{cluster.gateway}/mcp", json=INITIALIZE, headers=headers, timeout=10)
    return any(
        dict(r["headers"]).get("mcp-param-mark") == mark
        and dict(r["headers"]).get("authorization") == f"Bearer {token}"
        for r in httpx.get(f"http://{cluster.backend}/debug/requests").json()
    )


def test_backend_credentials_in_controller_mode(cluster: ClusterStack) -> None:
    """A policy naming a variable of the controller's environment (one that holds a key, as
    a Deployment's secretKeyRef would put it there) is refused, Accepted=False naming the field
    and secretRef, its route fails closed and the key never reaches the backend; passthrough
    hands on the caller's token. (tests/e2e/test_secret_refs.py runs secretRef on a server
    that serves Secrets.)"""
    api, token = cluster.api, cluster.token()

    def credentials(value: dict[str, Any] | None) -> int:
        return api.patch(
            "GatewayPolicy", NS, "mcp-authn", {"spec": {"backend": {"credentials": value}}}
        )

    try:
        env = {"header": "X-Api-Key", "value": {"env": "BACKEND_API_KEY"}}
        generation = credentials({"secretHeader": env})
        conditions = api.wait_conditions(
            "GatewayPolicy", NS, "mcp-authn", {"Accepted": "False"}, generation
        )
        message = conditions["Accepted"]["message"]
        assert message.startswith(
            "spec.backend.credentials.secretHeader.value: env: in a cluster a policy cannot "
            "read the gateway's environment variables"
        ), message
        assert "use secretRef" in message
        wait_until(
            lambda: cluster.initialize(token).status_code == 503, WAIT, "the route to fail closed"
        )
        received = httpx.get(f"http://{cluster.backend}/debug/requests").json()
        assert all(dict(r["headers"]).get("x-api-key") != BACKEND_API_KEY for r in received)
        generation = credentials({"secretHeader": None, "passthrough": True})
        api.wait_conditions("GatewayPolicy", NS, "mcp-authn", {"Accepted": "True"}, generation)
        wait_until(
            lambda: passed_through(cluster, token, uuid.uuid4().hex),
            WAIT,
            "the backend to receive the caller's token (passthrough)",
        )
    finally:
        generation = credentials(None)
        api.wait_conditions("GatewayPolicy", NS, "mcp-authn", {"Accepted": "True"}, generation)
        wait_until(lambda: cluster.initialize(token).status_code == 200, WAIT, "service to return")


def test_a_policy_targeting_a_missing_route_is_not_attached(cluster: ClusterStack) -> None:
    api = cluster.api
    orphan = copy.deepcopy(api.get("GatewayPolicy", NS, "mcp-authn"))
    orphan = {
        "apiVersion": orphan["apiVersion"],
        "kind": "GatewayPolicy",
        "metadata": {"name": "orphan", "namespace": NS},
        "spec": {
            **orphan["spec"],
            "targetRefs": [{**orphan["spec"]["targetRefs"][0], "name": "nope"}],
        },
    }
    api.create(orphan)
    try:
        conditions = api.wait_conditions(
            "GatewayPolicy", NS, "orphan", {"Accepted": "True", "Attached": "False"}, 1
        )
        assert conditions["Attached"]["reason"] == "TargetNotFound"
        assert "nope" in conditions["Attached"]["message"]
    finally:
        api.delete("GatewayPolicy", NS, "orphan")


def test_a_backend_in_another_namespace_needs_a_reference_grant(cluster: ClusterStack) -> None:
    api = cluster.api
    host, port = cluster.backend.rsplit(":", 1)
    api.create(
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayBackend",
            "metadata": {"name": "tools", "namespace": TOOLS_NS},
            "spec": {
                "mcp": {"targets": [{"name": "t", "static": {"host": host, "port": int(port)}}]}
            },
        }
    )
    api.create(
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "tools", "namespace": NS},
            "spec": {
                "parentRefs": [{"name": "mcp-gateway"}],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": "/tools"}}],
                        "backendRefs": [
                            {
                                "group": "mcp-oauth-gateway.dev",
                                "kind": "GatewayBackend",
                                "name": "tools",
                                "namespace": TOOLS_NS,
                            }
                        ],
                    }
                ],
            },
        }
    )

    def resolved() -> dict[str, Any]:
        parents = (api.get("HTTPRoute", NS, "tools").get("status") or {}).get("parents") or []
        return {c["type"]: c for p in parents for c in p["conditions"]}

    wait_until(lambda: "ResolvedRefs" in resolved(), WAIT, "the route's status")
    refs = resolved()["ResolvedRefs"]
    assert (refs["status"], refs["reason"]) == ("False", "RefNotPermitted")
    assert f"ReferenceGrant in namespace {TOOLS_NS}" in refs["message"]
    assert cluster.initialize(path="/tools").status_code == 503
    api.create(
        {
            "apiVersion": "gateway.networking.k8s.io/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": {"name": "routes-from-mcp", "namespace": TOOLS_NS},
            "spec": {
                "from": [
                    {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": NS}
                ],
                "to": [{"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend"}],
            },
        }
    )
    wait_until(lambda: resolved()["ResolvedRefs"]["status"] == "True", WAIT, "ResolvedRefs=True")
    wait_until(
        lambda: cluster.initialize(path="/tools").status_code == 200, WAIT, "the route to serve"
    )
    api.delete("HTTPRoute", NS, "tools")


def test_a_newer_route_with_the_same_match_cannot_take_a_path_over(cluster: ClusterStack) -> None:
    # Gateway API: among equal matches the oldest route wins. `aaa/hijack` sorts before
    # mcp-e2e/mcp by name, and with no policy it served /mcp without a token.
    api = cluster.api
    listeners = api.get("Gateway", NS, "mcp-gateway")["spec"]["listeners"]
    opened = [{**listeners[0], "allowedRoutes": {"namespaces": {"from": "All"}}}]
    api.patch("Gateway", NS, "mcp-gateway", {"spec": {"listeners": opened}})
    host, port = cluster.backend.rsplit(":", 1)
    api.create(
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayBackend",
            "metadata": {"name": "open", "namespace": "aaa"},
            "spec": {
                "mcp": {"targets": [{"name": "t", "static": {"host": host, "port": int(port)}}]}
            },
        }
    )
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "hijack", "namespace": "aaa"},
        "spec": {
            "parentRefs": [{"name": "mcp-gateway", "namespace": NS}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/mcp"}}],
                    "backendRefs": [
                        {"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend", "name": "open"}
                    ],
                }
            ],
        },
    }
    # Counted before the route exists, as above: its rebuild may precede a read made after.
    swaps = cluster.status()["controller"]["snapshotSwaps"]
    api.create(route)
    try:

        def bound() -> bool:
            parents = (api.get("HTTPRoute", "aaa", "hijack").get("status") or {}).get("parents")
            return bool(parents) and cluster.status()["controller"]["snapshotSwaps"] > swaps

        wait_until(bound, WAIT, "the newer route to be bound and built")
        for _ in range(5):
            assert cluster.initialize(None).status_code == 401

        def accepted() -> str:
            parents = api.get("HTTPRoute", "aaa", "hijack")["status"]["parents"]
            conditions = {c["type"]: c for p in parents for c in p["conditions"]}
            return str(conditions.get("Accepted", {}).get("message", ""))

        wait_until(lambda: "shadowed" in accepted(), WAIT, "the losing route's status")
        assert f"PathPrefix /mcp on port {cluster.gateway_port} is shadowed by HTTPRoute " in (
            accepted()
        )
        assert f"{NS}/mcp" in accepted()
    finally:
        api.delete("HTTPRoute", "aaa", "hijack")
        api.delete("GatewayBackend", "aaa", "open")
        api.patch("Gateway", NS, "mcp-gateway", {"spec": {"listeners": listeners}})


def test_a_burst_of_changes_is_one_snapshot_swap(cluster: ClusterStack) -> None:
    api = cluster.api
    host, port = cluster.backend.rsplit(":", 1)
    swaps = cluster.status()["controller"]["snapshotSwaps"]
    count = 40
    made: list[float] = []  # when each create was answered
    for number in range(count):
        api.create(
            {
                "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
                "kind": "GatewayBackend",
                "metadata": {"name": f"burst-{number}", "namespace": TOOLS_NS},
                "spec": {
                    "mcp": {"targets": [{"name": "t", "static": {"host": host, "port": int(port)}}]}
                },
            }
        )
        made.append(time.monotonic())
    api.wait_conditions("GatewayBackend", TOOLS_NS, f"burst-{count - 1}", {"Accepted": "True"}, 1)
    # Objects arrive over the watch a few milliseconds apart: they settle into one rebuild
    # (two when a rebuild happened to start just before the last few arrived, three with the
    # previous test's clean-up still being built). A burst a loaded machine slowed down settles,
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


# --- several replicas, one writer ----------------------------------------------------------------


def failover_objects(port: int, backend: str) -> list[dict[str, Any]]:
    """A class, Gateway, route and backend of their own (another controller name), so the two
    replicas under test never write the status the module's gateway writes."""
    host, backend_port = backend.rsplit(":", 1)
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "failover"},
            "spec": {"controllerName": "mcp-oauth-gateway.dev/failover-e2e"},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": FAILOVER_NS},
            "spec": {
                "gatewayClassName": "failover",
                "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
            },
        },
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayBackend",
            "metadata": {"name": "b", "namespace": FAILOVER_NS},
            "spec": {
                "mcp": {
                    "targets": [{"name": "t", "static": {"host": host, "port": int(backend_port)}}]
                }
            },
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": FAILOVER_NS},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [
                    {
                        "backendRefs": [
                            {
                                "group": "mcp-oauth-gateway.dev",
                                "kind": "GatewayBackend",
                                "name": "b",
                            }
                        ]
                    }
                ],
            },
        },
    ]


def replica(cluster: ClusterStack, logs: Path, name: str, host: str, admin_port: int) -> Process:
    return Process(
        f"k8s-{name}",
        controller_cmd(
            cluster.server.kubeconfig,
            admin_port,
            "--host",
            host,
            "--controller-name",
            "mcp-oauth-gateway.dev/failover-e2e",
            "--lease-namespace",
            FAILOVER_NS,
            "--lease-duration",
            "3",
        ),
        logs,
        env={"POD_NAME": name},
    )


def controller_state(admin_port: int) -> dict[str, Any]:
    try:
        return httpx.get(f"http://127.0.0.1:{admin_port}/status", timeout=5).json()["controller"]
    except (httpx.HTTPError, KeyError):
        return {}


def test_two_replicas_serve_one_writes_and_the_other_takes_over(
    cluster: ClusterStack, logs: Path
) -> None:
    api, port = cluster.api, free_port()
    for doc in failover_objects(port, cluster.backend):
        api.create(doc)
    admin = {"replica-1": free_port(), "replica-2": free_port()}
    hosts = {"replica-1": "127.0.0.2", "replica-2": "127.0.0.3"}
    processes = {
        name: replica(cluster, logs, name, hosts[name], admin[name])
        for name in ("replica-1", "replica-2")
    }
    try:
        for name in processes:
            url = f"http://{hosts[name]}:{port}/"
            wait_until(lambda url=url: _answers(url), WAIT, f"{name} to serve on {url}")
        # The leader as the poll that found exactly one saw it: asking each replica again
        # could meet the 3 s Lease between holders (none leading).
        leading: list[str] = []

        def one_leads() -> bool:
            leading[:] = [n for n in admin if controller_state(admin[n]).get("leader")]
            return len(leading) == 1

        wait_until(one_leads, WAIT, "exactly one leader")
        [leader] = leading
        follower = next(n for n in admin if n != leader)
        lease = api.get("Lease", FAILOVER_NS, "mcp-oauth-gateway")
        assert lease["spec"]["holderIdentity"] == leader
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
        generation = api.patch(
            "Gateway",
            FAILOVER_NS,
            "gw",
            {
                "spec": {
                    "listeners": [
                        {
                            "name": "http",
                            "port": port,
                            "protocol": "HTTP",
                            "hostname": "mcp.example",
                        }
                    ]
                }
            },
        )
        api.wait_conditions("Gateway", FAILOVER_NS, "gw", {"Programmed": "True"}, generation)
        assert (
            api.get("Lease", FAILOVER_NS, "mcp-oauth-gateway")["spec"]["holderIdentity"] == follower
        )

        # A replica that stops (SIGTERM) gives the Lease up at once.
        assert processes[follower].stop() == 0
        released = api.get("Lease", FAILOVER_NS, "mcp-oauth-gateway")["spec"]
        assert released["holderIdentity"] == ""
    finally:
        for process in processes.values():
            process.stop()


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
        return True
    except httpx.HTTPError:
        return False


def test_the_calls_a_replica_made_are_exactly_what_the_install_grants(
    cluster: ClusterStack,
) -> None:
    calls = {
        (c["verb"], c["apiGroup"], c["resource"])
        for c in cluster.status()["controller"]["apiCalls"]
    }
    # Every rule was used (kube-apiserver serves Services and Namespaces too), and nothing
    # beyond the rules was asked for.
    assert calls == deploy_rbac_rules()


def test_watches_resume_after_the_api_server_restarts(cluster: ClusterStack) -> None:
    api = cluster.api
    cluster.server.restart()
    host, port = cluster.backend.rsplit(":", 1)
    # A change made after the restart reaches the gateway through the resumed watches.
    api.create(
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayBackend",
            "metadata": {"name": "after-restart", "namespace": NS},
            "spec": {
                "mcp": {"targets": [{"name": "t", "static": {"host": host, "port": int(port)}}]}
            },
        }
    )
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
    host, port = cluster.backend.rsplit(":", 1)
    ns = "granted-tools"
    api.create(
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayBackend",
            "metadata": {"name": "tools", "namespace": ns},
            "spec": {
                "mcp": {"targets": [{"name": "t", "static": {"host": host, "port": int(port)}}]}
            },
        }
    )
    api.create(
        {
            "apiVersion": "gateway.networking.k8s.io/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": {"name": "routes-from-mcp", "namespace": ns},
            "spec": {
                "from": [
                    {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": NS}
                ],
                "to": [{"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend"}],
            },
        }
    )
    ref = {"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend", "name": "tools"}
    api.create(
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "granted", "namespace": NS},
            "spec": {
                "parentRefs": [{"name": "mcp-gateway"}],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": "/granted"}}],
                        "backendRefs": [{**ref, "namespace": ns}],
                    }
                ],
            },
        }
    )
    wait_until(
        lambda: cluster.initialize(path="/granted").status_code == 200, WAIT, "the route to serve"
    )
    before = cluster.status()["controller"]["snapshotSwaps"]
    cluster.server.restart()
    marker = f"after-grants-{uuid.uuid4().hex[:8]}"
    api.patch("GatewayBackend", ns, "tools", {"metadata": {"labels": {"m": marker}}})
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
