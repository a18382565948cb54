"""Session and module fixtures for the real services tests need beside the gateway: Redis, the
Kubernetes API server (kube-apiserver with etcd, kubectl and Helm; one for the session, fresh
ones for modules that install things),
Keycloak itself, MCP servers of both SDKs (and third-party ones with their own OAuth), and an
OTLP receiver. Registered by conftest.py."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support import NODE_DIR, PEERS, Process, free_port, node, wait_for_port
from xdist_scheduling import require_group


@pytest.fixture(scope="session")
def backend(logs: Path) -> Iterator[str]:
    """`host:port` of a real MCP SDK server."""
    port = free_port()
    proc = Process("mcp-backend", [sys.executable, str(PEERS / "mcp_backend.py"), str(port)], logs)
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def ts_backend(logs: Path) -> Iterator[str]:
    """`host:port` of a real TypeScript SDK server (Express, body-parser) with ledgers of the
    tool calls it ran and the headers it received."""
    port = free_port()
    proc = Process(
        "ts-backend", [node(), str(NODE_DIR / "ts_backend.mjs")], logs, env={"PORT": str(port)}
    )
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def otlp_receiver(logs: Path) -> Iterator[str]:
    """Base URL of an OTLP/HTTP receiver that lists what it got at `/spans`."""
    port = free_port()
    proc = Process(
        "otlp-receiver", [sys.executable, str(PEERS / "otlp_receiver.py"), str(port)], logs
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def redis_url(logs: Path) -> Iterator[str]:
    """A real redis-server on a free loopback port, no persistence."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required: `make test` installs the Debian package"
    port = free_port()
    proc = Process(
        "redis",
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ],
        logs,
    )
    try:
        wait_for_port(port, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.stop()


def _built_and_started(
    request: pytest.FixtureRequest,
    prepare: Callable[[], None],
    start: Callable[[], Any],
    errors: tuple[type[Exception], ...],
) -> Any:
    """A local server whose tool first builds or fetches it, then starts it, its progress shown
    live (a first build takes minutes, a Keycloak start ~15 s). A failure fails the test
    (never skips it) with the tool's own one-line message."""
    import contextlib

    capture = request.config.pluginmanager.getplugin("capturemanager")
    live = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    failure = None
    try:
        with live:
            prepare()
            return start()
    except errors as error:
        failure = str(error)
    # Outside the except block: the report shows the tool's message, not a traceback chain.
    pytest.fail(failure, pytrace=False)


@pytest.fixture(scope="session")
def apiserver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """A real Kubernetes API server for the session (kube-apiserver v1.36 + etcd, as the
    `kube_apiserver` fixture has it) serving the Gateway API CRDs of tests/devcluster/crds, as a
    `devcluster.cluster.DevCluster` used with the admin's certificate. NamespaceLifecycle is
    off: its tests name namespaces they never create. The first build compiles for minutes."""
    # Imported here: only the tests that need a cluster load its support.
    from devcluster.apiserver import CRDS, DevApiServerError
    from devcluster.cluster import DevCluster

    require_group(request, "apiserver")
    server = _built_and_started(
        request,
        lambda: DevCluster.build(echo=True),
        lambda: DevCluster.start(tmp_path_factory.mktemp("apiserver"), any_namespace=True),
        (DevApiServerError,),
    )
    try:
        server.apply_crds(sorted(CRDS.glob("*.yaml")))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def kube_apiserver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """A full Kubernetes API server (kube-apiserver v1.36 + etcd, RBAC on, ServiceAccount
    tokens, an audit log of every ServiceAccount's requests) with kubectl and Helm, as a
    `devcluster.cluster.DevCluster`; a fresh one for each module, since modules install things.
    The first build compiles from the Go module proxy for several minutes."""
    from devcluster.apiserver import DevApiServerError
    from devcluster.cluster import DevCluster

    server = _built_and_started(
        request,
        lambda: DevCluster.build(echo=True),
        lambda: DevCluster.start(tmp_path_factory.mktemp("kube-apiserver")),
        (DevApiServerError,),
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def real_keycloak(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """Keycloak 26 itself (tools/dev_keycloak.py), one server for the session, as a
    `keycloak_support.RealKeycloak`; modules that must not share the master realm make one of
    their own. Java, Maven and the distribution missing fail with the tool's message; the
    first fetch downloads from Maven Central."""
    from keycloak_support import KeycloakError, RealKeycloak

    require_group(request, "real_keycloak")
    server = _built_and_started(
        request,
        lambda: RealKeycloak.fetch(echo=True),
        lambda: RealKeycloak.start(tmp_path_factory.mktemp("keycloak")),
        (KeycloakError,),
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def upstreams(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """Third-party MCP servers that enforce their own OAuth, each with its own authorization
    server, started on demand: `upstreams(server="fastmcp"|"ts", auth="oidc-provider"|"keycloak",
    redirect_uris=[…], keycloak=real_keycloak, …)` takes the options of
    `upstream_servers_support.upstream` and returns an `upstream_servers_support.Upstream`; all
    are stopped at the module's end."""
    from contextlib import ExitStack

    from upstream_servers_support import upstream

    with ExitStack() as running:

        def start(server: str = "fastmcp", auth: str = "oidc-provider", **options: Any) -> Any:
            directory = tmp_path_factory.mktemp("upstream")
            return running.enter_context(upstream(logs, directory, server, auth, **options))

        yield start
