"""The spec's example (examples/kubernetes) served in controller mode against a real Kubernetes
API server (kube-apiserver v1.36.4 + etcd, the session's `apiserver`: admin credentials,
namespaces used without being created), for the test_kubernetes_* modules.

The example is applied with local addresses: the gateway's listener on a free port, the MCP
backend and the OpenID provider on loopback, and the provider's keys fetched from
`jwks.remote.url` (no kube-proxy or DNS runs: a Service name would send the gateway to DNS).

Each module serves the example from a `Site` of its own (namespace, GatewayClass, controller
name) on the session's API server, so no module's gateway reads or writes another's objects;
the objects a module leaves behind are left to the session's server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from joserfc.jwk import RSAKey

from kube_support import ACCEPT, INITIALIZE, WAIT, Api, controller_cmd
from support import (
    NODE_DIR,
    ROOT,
    Process,
    claims_for,
    free_port,
    mint,
    node,
    wait_for_keyset,
    wait_for_port,
)
from xdist_scheduling import APISERVER

CLIENT_ID = "mcp-public"
EXAMPLE = ROOT / "examples" / "kubernetes"
POLICY_CRDS = sorted((ROOT / "deploy" / "crds").glob("*.yaml"))
# In the gateway's environment, as a Deployment's secretKeyRef would put a key there.
BACKEND_API_KEY = "k8s-backend-api-key-7"
# The module fixture's parameters: the project's own Gateway API CRDs (what `make test` uses) or
# the official v1.6.1 experimental ones from CONTRACTS_DIR (`make test-contracts`).
# Each module reaches the session's API server by this parameter (`gateway_api`): its xdist group.
GATEWAY_API_CRDS = [
    pytest.param("project-crds", marks=APISERVER),
    pytest.param("official-crds", marks=pytest.mark.contracts),
]


@dataclass(frozen=True)
class Site:
    """Where a module's copy of the example lives and which controller serves it."""

    namespace: str
    gateway_class: str = "mcp-oauth-gateway"
    controller: str = "mcp-oauth-gateway.dev/gateway-controller"


def own_site(namespace: str) -> Site:
    """A module's site: its namespace, a GatewayClass and a controller name of the same name."""
    return Site(namespace, namespace, f"mcp-oauth-gateway.dev/{namespace}")


def example_cluster(site: Site) -> Any:
    """A module's `cluster` fixture: the example at `site` on each API server GATEWAY_API_CRDS
    names, served in controller mode (assign it to `cluster` in the module)."""

    @pytest.fixture(scope="module", params=GATEWAY_API_CRDS)
    def cluster(
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
        logs: Path,
        idp_key: tuple[RSAKey, Path],
        backend: str,
    ) -> Iterator[ClusterStack]:
        with (
            gateway_api(request, tmp_path_factory) as server,
            serve_example(server, site, logs, idp_key, backend) as stack,
        ):
            yield stack

    return cluster


def _example_docs() -> list[dict[str, Any]]:
    """examples/kubernetes as shipped, without what the test server cannot serve or need."""
    docs = []
    for path in sorted(EXAMPLE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            # Modules name their own namespaces, which the session's server lets objects use
            # without creating them (--any-namespace); no grant is needed here.
            if doc and doc["kind"] not in ("ReferenceGrant", "Namespace"):
                docs.append(doc)
    return docs


def _localize(doc: dict[str, Any], site: Site, gateway_port: int, idp: str, gateway: str) -> None:
    """One example object moved to `site` with local addresses (the backend aside)."""
    if doc["metadata"].get("namespace") == "mcp":
        doc["metadata"]["namespace"] = site.namespace
    if doc["kind"] == "GatewayClass":
        doc["metadata"]["name"] = site.gateway_class
        doc["spec"]["controllerName"] = site.controller
    elif doc["kind"] == "Gateway":
        doc["spec"]["gatewayClassName"] = site.gateway_class
        doc["spec"]["listeners"][0]["port"] = gateway_port
    elif doc["kind"] == "HTTPRoute":
        doc["spec"]["parentRefs"][0]["namespace"] = site.namespace
    elif doc["kind"] == "GatewayPolicy":
        jwt = doc["spec"]["traffic"]["jwtAuthentication"]
        jwt["providers"][0]["issuer"] = f"{idp}/application/o/mcp/"
        jwt["providers"][0]["jwks"] = {"remote": {"url": f"{idp}/application/o/mcp/jwks/"}}
        jwt["mcp"]["resourceMetadata"]["resource"] = f"{gateway}/mcp"


def example_objects(
    site: Site, gateway_port: int, idp: str, backend: str, gateway: str
) -> list[dict[str, Any]]:
    """examples/kubernetes with local addresses, at `site` (no Service, no grant)."""
    docs = _example_docs()
    for doc in docs:
        _localize(doc, site, gateway_port, idp, gateway)
        if doc["kind"] == "GatewayBackend":
            # This server has no Services: the backend by its loopback address, which the
            # controller is allowed to reach (kube_support.controller_cmd).
            host, port = backend.rsplit(":", 1)
            target = doc["spec"]["mcp"]["targets"][0]
            target["static"] = {
                "host": host,
                "port": int(port),
                "path": target.pop("service")["path"],
            }
    return docs


@dataclass
class ClusterStack:
    """The example on the API server and the gateway serving it, with what tests ask of them."""

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


@contextmanager
def gateway_api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """An API server serving Gateway API CRDs as `request.param` (GATEWAY_API_CRDS) says: the
    project's own on the session's server, or the official ones on a server of their own,
    since both define the same kinds."""
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


def _idp(idp_port: int, key_file: Path, gateway: str, logs: Path) -> Process:
    """The OpenID provider the example's policy names, set up like authentik."""
    env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(key_file),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"{gateway}/mcp",
        "SLUG": "mcp",
    }
    return Process(f"k8s-idp-{idp_port}", [node(), str(NODE_DIR / "idp.mjs")], logs, env=env)


@contextmanager
def serve_example(
    apiserver: Any, site: Site, logs: Path, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[ClusterStack]:
    """The example applied at `site` and a gateway serving it in controller mode."""
    apiserver.apply_crds(POLICY_CRDS)
    api = Api(apiserver)
    gateway_port, idp_port, admin_port = free_port(), free_port(), free_port()
    gateway, idp = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{idp_port}"
    idp_process = _idp(idp_port, idp_key[1], gateway, logs)
    for doc in example_objects(site, gateway_port, idp, backend, gateway):
        api.create(doc)
    process = Process(
        f"k8s-gateway-{site.namespace}",
        controller_cmd(
            apiserver.kubeconfig,
            admin_port,
            *("--controller-name", site.controller, "--lease-namespace", site.namespace),
        ),
        logs,
        # As a Deployment gives a mounted Secret: env.valueFrom.secretKeyRef.
        env={"POD_NAME": "replica-a", "BACKEND_API_KEY": BACKEND_API_KEY},
    )
    try:
        wait_for_port(idp_port, idp_process)
        wait_for_port(admin_port, process)
        admin = f"http://127.0.0.1:{admin_port}"
        stack = ClusterStack(
            api, apiserver, gateway, admin, idp, idp_key[0], process, gateway_port, backend
        )
        wait_for_port(gateway_port, process, timeout=WAIT)
        # The port opens before the provider's keyset is fetched: until then a valid token is
        # refused with a 503, which the first test of a module on a loaded machine met.
        wait_for_keyset(gateway, stack.token(), timeout=WAIT)
        yield stack
    finally:
        process.stop()
        idp_process.stop()
