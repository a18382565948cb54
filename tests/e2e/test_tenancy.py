"""One gateway for a cluster whose platform namespace and tenant namespaces do not trust each
other, on a full Kubernetes API server (the `kube_apiserver` fixture: RBAC on).

The platform (the cluster admin) installs deploy/, a GatewayClass and its Gateway with two
listeners on one port: `api` (its own routes, any host but the tenants') and `tenants`
(`*.tenants.example`, routes from every namespace), and protects `/mcp` with a GatewayPolicy.
Tenants act as themselves (`kubectl --as alice`/`bob`), bound to a Role that may write
Gateways, HTTPRoutes, GatewayPolicies and GatewayBackends in their own namespace only. The
controller runs as deploy/rbac.yaml's ServiceAccount with a token from `kubectl create token`.
What a tenant points its routes at is a loopback server that records every request it gets:
it must never see one meant for the platform (nor a caller's bearer token).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from joserfc.jwk import RSAKey

from devcluster.apiserver import CRDS
from devcluster.cluster import DevCluster
from kube_support import ACCEPT, INITIALIZE, WAIT, controller_cmd, service_account_kubeconfig
from listener_tenancy_support import (
    CLIENT_ID,
    PLATFORM,
    TENANT_HOSTS,
    USERS,
    Trap,
    apply,
    class_parameters,
    conditions_of,
    delete,
    gateway,
    gateway_condition,
    platform_objects,
    read,
    restricted_class,
    route_parent,
    routed,
    tenant_role,
    trap_handler,
    wait_for,
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

INSTALL_NS = "mcp-oauth-gateway"


@pytest.fixture(scope="module")
def trap() -> Iterator[Trap]:
    port = free_port()
    found = Trap(f"127.0.0.1:{port}")
    server = ThreadingHTTPServer(("127.0.0.1", port), trap_handler(found))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


# --- the cluster: deploy/, namespaces, tenants ----------------------------------------------


@pytest.fixture(scope="module")
def cluster(kube_apiserver: DevCluster) -> DevCluster:
    crds = sorted(CRDS.glob("*.gateway.networking.k8s.io.yaml"))
    for crd in crds:
        kube_apiserver.kubectl("apply", "--validate=strict", "-f", str(crd))
    names = [f"crd/{crd.name.removesuffix('.yaml')}" for crd in crds]
    kube_apiserver.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    kube_apiserver.kubectl("apply", "--validate=strict", "-k", str(ROOT / "deploy"))
    for namespace in (PLATFORM, *USERS):
        kube_apiserver.kubectl("create", "namespace", namespace)
    kube_apiserver.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(tenant_role()))
    assert_tenants_act_in_their_own_namespace_only(kube_apiserver)
    return kube_apiserver


def assert_tenants_act_in_their_own_namespace_only(cluster: DevCluster) -> None:
    """What the tests rely on: a tenant writes routing objects in its namespace, nothing else."""

    def can(*what: str) -> str:
        done = cluster.kubectl("auth", "can-i", *what, "--as", "alice", check=False)
        return done.stdout.strip()

    assert can("create", "gateways.gateway.networking.k8s.io", "-n", "tenant-a") == "yes"
    assert can("create", "gateways.gateway.networking.k8s.io", "-n", PLATFORM) == "no"
    assert can("create", "httproutes.gateway.networking.k8s.io", "-n", "tenant-b") == "no"
    assert can("create", "gatewayclasses.gateway.networking.k8s.io") == "no"
    assert can("patch", "gatewayclassparameters.mcp-oauth-gateway.dev") == "no"


# --- the gateway ---------------------------------------------------------------------------


@dataclass
class Gateway:
    process: Process
    admin: str
    port: int
    idp: str
    key: RSAKey

    def token(self) -> str:
        return mint(self.key, claims_for(f"{self.idp}/application/o/mcp/", CLIENT_ID))

    def initialize(self, host: str | None = None, token: str | None = None) -> httpx.Response:
        headers = dict(ACCEPT)
        if host is not None:
            headers["Host"] = host
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        url = f"http://127.0.0.1:{self.port}/mcp"
        return httpx.post(url, json=INITIALIZE, headers=headers, timeout=10)

    def bound(self) -> list[int]:
        state = httpx.get(f"{self.admin}/status", timeout=5).json()["controller"]
        return list(state["listeners"])


@pytest.fixture(scope="module")
def served(
    cluster: DevCluster,
    logs: Path,
    idp_key: tuple[RSAKey, Path],
    backend: str,
    trap: Trap,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    port, idp_port, admin_port = free_port(), free_port(), free_port()
    idp = f"http://127.0.0.1:{idp_port}"
    idp_env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(idp_key[1]),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"http://127.0.0.1:{port}/mcp",
        "SLUG": "mcp",
    }
    idp_process = Process("tenancy-idp", [node(), str(NODE_DIR / "idp.mjs")], logs, env=idp_env)
    apply(cluster, platform_objects(port, idp, backend))
    kubeconfig = service_account_kubeconfig(
        cluster, INSTALL_NS, "mcp-oauth-gateway", tmp_path_factory.mktemp("sa") / "kubeconfig"
    )
    process = Process(
        "tenancy-gateway",
        controller_cmd(kubeconfig, admin_port),
        logs,
        env={"POD_NAME": "tenancy-0", "POD_NAMESPACE": INSTALL_NS},
    )
    try:
        wait_for_port(idp_port, idp_process)
        wait_for_port(port, process, timeout=WAIT)
        found = Gateway(process, f"http://127.0.0.1:{admin_port}", port, idp, idp_key[0])
        gateway_condition(cluster, PLATFORM, "gw", "Programmed", "True")
        cluster.kubectl(
            "wait",
            "--for=condition=ResolvedRefs",
            "--timeout=60s",
            "gatewaypolicy/auth",
            "-n",
            PLATFORM,
        )
        # Where every test starts: the platform's path is the platform's.
        assert_the_platform_answers(found, trap)
        yield found
    finally:
        process.stop()
        idp_process.stop()


def assert_the_platform_answers(served: Gateway, trap: Trap, host: str | None = None) -> None:
    """The platform's path: 401 without a token, its MCP backend with one, the trap untouched."""
    before = list(trap.seen)
    refused = served.initialize(host)
    assert refused.status_code == 401, (host, refused.status_code, refused.text)
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    answer = served.initialize(host, served.token())
    assert answer.status_code == 200, (host, answer.text)
    assert "serverInfo" in answer.text, answer.text
    assert trap.seen == before, f"the tenant's backend got {trap.seen[len(before) :]}"


# --- the tests, in file order ----------------------------------------------------------------


def test_a_tenants_gateway_on_the_platforms_port_is_refused_and_the_path_stays_the_platforms(
    cluster: DevCluster, served: Gateway, trap: Trap
) -> None:
    # Alice's Gateway on the platform's port, taking routes from anywhere, and an Exact /mcp
    # (which sorts before the platform's PathPrefix /mcp) to her own backend.
    listeners = [
        {
            "name": "http",
            "port": served.port,
            "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }
    ]
    docs = [
        gateway("tenant-a", "gw", listeners),
        *routed("tenant-a", "grab", {"name": "gw"}, trap.url),
    ]
    apply(cluster, docs, "alice")
    try:
        # Once the controller has judged Alice's objects, the path is still the platform's.
        judged = gateway_condition(cluster, "tenant-a", "gw", "Accepted")
        parent = route_parent(cluster, "tenant-a", "grab")
        assert_the_platform_answers(served, trap)
        # And both say why.
        status = judged["status"]
        accepted = conditions_of(status["conditions"])["Accepted"]
        assert (accepted["status"], accepted["reason"]) == ("False", "ListenersNotValid")
        assert conditions_of(status["conditions"])["Programmed"]["status"] == "False"
        (listener,) = status["listeners"]
        why = conditions_of(listener["conditions"])["Accepted"]
        assert (why["status"], why["reason"]) == ("False", "PortUnavailable")
        assert f"port {served.port} belongs to Gateway platform/gw" in why["message"]
        assert listener["attachedRoutes"] == 0
        assert parent["status"] == "False"
        assert "is not served: port" in parent["message"]
        # The platform's Gateway is untouched by it.
        platform = gateway_condition(cluster, PLATFORM, "gw", "Accepted", "True")
        assert conditions_of(platform["status"]["conditions"])["Accepted"]["reason"] == "Accepted"
    finally:
        delete(cluster, docs, "alice")


def test_a_tenant_route_on_a_listener_with_another_hostname_is_not_served(
    cluster: DevCluster, served: Gateway, trap: Trap
) -> None:
    tenants = {"name": "gw", "namespace": PLATFORM, "sectionName": "tenants"}
    # Bob names the platform's host on the tenants' listener, and takes /mcp on every host
    # the tenants' listener is for.
    steal = routed("tenant-b", "steal", tenants, trap.url, hostnames=("api.platform.example",))
    own = routed("tenant-b", "own", tenants, trap.url)
    apply(cluster, steal + own, "bob")
    try:
        parent = route_parent(cluster, "tenant-b", "steal")
        assert route_parent(cluster, "tenant-b", "own")["status"] == "True"
        # Once judged, the platform's host and every other host stay the platform's...
        for host in ("api.platform.example", f"127.0.0.1:{served.port}", "tenants.example"):
            assert_the_platform_answers(served, trap, host)
        # ...and Bob's route answers where the tenants' listener is for.
        answer = served.initialize("bob.tenants.example")
        assert answer.status_code == 200, answer.text
        assert trap.seen[-1] == ("bob.tenants.example", "/mcp", False)
        assert (parent["status"], parent["reason"]) == ("False", "NoMatchingListenerHostname")
        assert f"takes hostname {TENANT_HOSTS} only" in parent["message"]
    finally:
        delete(cluster, steal + own, "bob")


def test_a_class_restricted_to_the_platform_namespace_refuses_the_tenants_gateway(
    cluster: DevCluster, served: Gateway, trap: Trap
) -> None:
    admin = [
        class_parameters("platform-only", [PLATFORM]),
        restricted_class("restricted", "platform-only"),
        restricted_class("broken", "none"),
    ]
    theirs, ours = free_port(), free_port()
    http = [{"name": "http", "port": theirs, "protocol": "HTTP"}]
    tenant = [gateway("tenant-a", "own", http, "restricted")]
    tenant += routed("tenant-a", "own", {"name": "own"}, trap.url)
    platform = gateway(PLATFORM, "own", [{"name": "http", "port": ours, "protocol": "HTTP"}])
    platform["spec"]["gatewayClassName"] = "restricted"
    apply(cluster, [*admin, platform])
    apply(cluster, tenant, "alice")
    try:
        judged = gateway_condition(cluster, "tenant-a", "own", "Accepted")
        gateway_condition(cluster, PLATFORM, "own", "Programmed", "True")
        wait_until(lambda: ours in served.bound(), WAIT, "the platform's Gateway served")
        # Once judged, the tenant's Gateway is not served: nothing listens on its port.
        assert theirs not in served.bound()
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"http://127.0.0.1:{theirs}/mcp", json=INITIALIZE, timeout=5)
        accepted = conditions_of(judged["status"]["conditions"])["Accepted"]
        assert (accepted["status"], accepted["reason"]) == ("False", "NamespaceNotAllowed")
        assert accepted["message"].startswith(
            "GatewayClass restricted does not allow Gateways in namespace tenant-a"
        )
        parent = route_parent(cluster, "tenant-a", "own", "False")
        assert "Gateway tenant-a/own is not served" in parent["message"]

        # A class whose parametersRef names nothing is refused, naming the field.
        def class_accepted() -> dict[str, Any] | None:
            status = read(cluster, "gatewayclass", None, "broken").get("status") or {}
            return conditions_of(status.get("conditions")).get("Accepted")

        broken = wait_for(cluster, "GatewayClass broken", class_accepted)
        assert (broken["status"], broken["reason"]) == ("False", "InvalidParameters")
        assert broken["message"].startswith("spec.parametersRef: GatewayClassParameters none")
        # The tenant cannot widen the class.
        widened = class_parameters("platform-only", [PLATFORM, "tenant-a"])
        denied = cluster.kubectl(
            "apply", "--as", "alice", "-f", "-", stdin=json.dumps(widened), check=False
        )
        assert denied.returncode != 0
        assert "forbidden" in denied.stderr, denied.stderr
        assert_the_platform_answers(served, trap)
    finally:
        delete(cluster, tenant, "alice")
        delete(cluster, [platform, *admin])
