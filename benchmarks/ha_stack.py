"""The servers of the failover and rolling-restart benchmarks, on loopback: the dev identity
provider (Keycloak flavour: it serves token revocation) provisioned for a Broker route by the
gateway's own `idp keycloak` code, the benchmark's `mcp` SDK server behind that route (`/mcp`),
two named `mcp` SDK servers behind a federated route (`/fed`, the same provider's tokens), and
N gateway processes with one configuration but for their listener port, sharing one Redis
through `MCP_OAUTH_GATEWAY_REDIS_URL`. The route's public URL (its resource, and the
provider's redirect URI) is `public`: a load balancer's address, or the first replica's."""

from __future__ import annotations

import copy
import signal
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from ha_parts import ROOT, Process, free_port, wait_for_port, wait_until

from mcp_oauth_gateway.authorization_server_modes import AuthorizationServerMode
from mcp_oauth_gateway.idp import keycloak
from mcp_oauth_gateway.idp.resources import GatewayValues, render
from mcp_oauth_gateway.idp.steps import Progress
from mcp_oauth_gateway.provider_kinds import ProviderKind

HERE = Path(__file__).resolve().parent
ADMIN_PASSWORD = "bench-admin"
USER, PASSWORD = "alice", "bench-password"
FEDERATED = ("a", "b")


@dataclass
class Replica:
    """One gateway process: its port, configuration and (while it runs) process."""

    name: str
    port: int
    config: Path
    status_port: int
    process: Process | None = None
    starts: int = 0

    @property
    def base(self) -> str:
        """`http://127.0.0.1:<port>`."""
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Stack:
    """The running servers (stopped by the ExitStack given to `start_stack`)."""

    public: str
    idp: str
    values: GatewayValues
    replicas: list[Replica]
    redis_url: str
    logs: Path
    extra_flags: tuple[str, ...] = ()
    # The other servers by name: dev-idp, mcp-backend, fed-a, fed-b.
    servers: dict[str, Process] = field(default_factory=dict)

    @property
    def mcp(self) -> str:
        """The Broker route's public URL (its resource and issuer)."""
        return f"{self.public}/mcp"

    @property
    def fed(self) -> str:
        """The federated route's public URL."""
        return f"{self.public}/fed"

    def start(self, replica: Replica) -> None:
        """Start `replica`'s gateway and wait until it serves the Broker route."""
        replica.starts += 1
        replica.process = Process(
            f"{replica.name}-{replica.starts}",
            [
                sys.executable,
                "-m",
                "mcp_oauth_gateway",
                "serve",
                "-f",
                str(replica.config),
                "--status-port",
                str(replica.status_port),
                *self.extra_flags,
            ],
            self.logs,
            env={"MCP_OAUTH_GATEWAY_REDIS_URL": self.redis_url},
        )
        wait_for_port(replica.port, replica.process, timeout=60)
        metadata = f"{replica.base}/.well-known/oauth-authorization-server/mcp"
        wait_until(lambda: _answers(metadata), 60, f"{replica.name} to serve the Broker route")

    def signal(self, replica: Replica, signum: signal.Signals) -> None:
        """Send `signum` to `replica`'s gateway."""
        assert replica.process is not None
        replica.process.popen.send_signal(signum)

    def stop(self, replica: Replica) -> None:
        """Stop `replica`'s gateway (SIGTERM, then SIGKILL after 10 s)."""
        if replica.process is not None:
            replica.process.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _spawn(running: ExitStack, logs: Path, name: str, port: int, cmd: list[str]) -> Process:
    env = {"DEV_IDP_ADMIN_PASSWORD": ADMIN_PASSWORD}
    process = Process(name, cmd, logs, env=env)
    running.callback(process.stop)
    wait_for_port(port, process, timeout=60)
    return process


def _provision(idp: str, public: str, backend: str) -> GatewayValues:
    """The dev IdP set up for a Broker route at `public`/mcp, as `idp keycloak` does."""
    options = keycloak.KeycloakOptions(
        url=idp,
        admin_user="admin",
        admin_password=ADMIN_PASSWORD,
        resource=f"{public}/mcp",
        users=[(USER, f"{USER}@example.com")],
        user_password=PASSWORD,
        backend=backend,
        mode=AuthorizationServerMode.BROKER,
    )
    with httpx.Client(timeout=30) as http:
        return keycloak.provision(
            options, http, Progress(ProviderKind.KEYCLOAK.flavour, len(keycloak.STEPS))
        )


def _federated(documents: list[dict[str, Any]], targets: dict[str, int]) -> list[dict[str, Any]]:
    """A federated route at /fed over `targets`, verifying the Broker route's provider's
    tokens (its policy without the Broker section)."""
    route = copy.deepcopy(next(d for d in documents if d["kind"] == "HTTPRoute"))
    route["metadata"]["name"] = "fed"
    rule = route["spec"]["rules"][0]
    rule["matches"] = [{"path": {"type": "PathPrefix", "value": "/fed"}}]
    rule["backendRefs"] = [
        {"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend", "name": "fed"}
    ]
    backend = {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayBackend",
        "metadata": {"name": "fed", "namespace": "default"},
        "spec": {
            "mcp": {
                "targets": [
                    {"name": name, "static": {"host": "127.0.0.1", "port": port}}
                    for name, port in targets.items()
                ]
            }
        },
    }
    policy = copy.deepcopy(next(d for d in documents if d["kind"] == "GatewayPolicy"))
    policy["metadata"]["name"] = "fed-authn"
    policy["spec"]["targetRefs"][0]["name"] = "fed"
    for provider in policy["spec"]["traffic"]["jwtAuthentication"]["providers"]:
        provider.pop("mcp", None)
    return [route, backend, policy]


def _write_config(
    directory: Path, values: GatewayValues, port: int, targets: dict[str, int]
) -> Path:
    """The provisioned resources and the federated route, listening on `port`."""
    # Plain YAML objects from here on (render's values are typed as `object`).
    documents: list[dict[str, Any]] = list(yaml.safe_load_all(yaml.safe_dump_all(render(values))))
    gateway = next(d for d in documents if d["kind"] == "Gateway")
    gateway["spec"]["listeners"][0]["port"] = port
    documents += _federated(documents, targets)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def start_stack(
    running: ExitStack,
    work: Path,
    redis_url: str,
    replicas: int,
    public: str | None = None,
    extra_flags: tuple[str, ...] = (),
) -> Stack:
    """Start every server (`public`: the load balancer's base URL, else the first replica's);
    every replica is started and serving when this returns."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    idp_port, backend_port = free_port(), free_port()
    targets = {name: free_port() for name in FEDERATED}
    named = str(ROOT / "tests" / "peers" / "mcp_named.py")
    # Access tokens outlive the run: the load uses them without refreshing first.
    dev_idp = [py, "-m", "mcp_oauth_gateway", "dev-idp", "--flavor", "keycloak"]
    commands = {
        "dev-idp": (idp_port, [*dev_idp, "--port", str(idp_port), "--access-token-ttl", "3600"]),
        "mcp-backend": (backend_port, [py, str(HERE / "mcp_backend.py"), str(backend_port)]),
        **{f"fed-{n}": (port, [py, named, n, str(port)]) for n, port in targets.items()},
    }
    servers = {
        name: _spawn(running, logs, name, port, cmd) for name, (port, cmd) in commands.items()
    }
    ports = [free_port() for _ in range(replicas)]
    public = public or f"http://127.0.0.1:{ports[0]}"
    idp = f"http://127.0.0.1:{idp_port}"
    values = _provision(idp, public, f"http://127.0.0.1:{backend_port}/mcp")
    stack = Stack(public, idp, values, [], redis_url, logs, extra_flags, servers)
    for n, port in enumerate(ports):
        config = _write_config(work / f"replica-{n}", values, port, targets)
        replica = Replica(f"gateway-{n}", port, config, free_port())
        stack.replicas.append(replica)
        running.callback(stack.stop, replica)
        stack.start(replica)
    return stack
