"""A federated route on real processes: named `mcp` SDK servers (peers/mcp_named.py) and the
TypeScript SDK server as targets, one gateway in front of them whose policy verifies tokens
against an inline key and hides target `b` from everyone but admins, and a real `mcp` SDK
client session through it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from joserfc.jwk import RSAKey
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from support import PEERS, Process, claims_for, gateway_cmd, jwks_of, mint, wait_for_port

ISSUER = "http://idp.federation.test/"
AUDIENCE = "mcp-federation"
# A rule per target and one per tool: everyone may use `a` and `ts`, admins `b` too, and nobody
# `ts_delete_all` (its description holds a lone surrogate, which the Python SDK client refuses).
RULES = [
    'mcp.target == "a"',
    'mcp.target == "ts" && !(has(mcp.tool) && mcp.tool.name == "ts_delete_all")',
    'mcp.target == "b" && "admin" in jwt.groups',
]


def named_server(name: str, port: int, logs: Path, json_answers: bool = False) -> Process:
    """A running peers/mcp_named.py (answers as event streams, or plain JSON)."""
    args = [sys.executable, str(PEERS / "mcp_named.py"), name, str(port)]
    process = Process(f"fed-{name}-{port}", [*args, *(["json"] if json_answers else [])], logs)
    wait_for_port(port, process)
    return process


def asking_server(name: str, port: int, logs: Path, resumable: bool = False) -> Process:
    """A running peers/mcp_asking.py (tools that ask the client back; with `resumable`, it keeps
    its streams' events and resumes them)."""
    args = [sys.executable, str(PEERS / "mcp_asking.py"), name, str(port)]
    args += ["resumable"] if resumable else []
    process = Process(f"fed-asking-{name}-{port}", args, logs)
    wait_for_port(port, process)
    return process


def kill(process: Process) -> None:
    """Kill a target at once (no graceful shutdown: it drops its sessions mid-flight)."""
    process.popen.kill()
    process.popen.wait(10)
    process.stop()


def _gateway_and_route(gateway_port: int, cors_origin: str | None) -> str:
    """The Gateway and the route to the federated backend (CORS for `cors_origin`, if any)."""
    cors = (
        f"      filters: [{{type: CORS, cors: {{allowOrigins: ['{cors_origin}'], "
        "allowMethods: [POST]}}]\n"
        if cors_origin
        else ""
    )
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  listeners: [{{name: http, port: {gateway_port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: federated}}]
      timeouts: {{backendRequest: 5s}}
{cors}"""


def _backend_and_policy(targets: dict[str, int], key: RSAKey, rules: list[str]) -> str:
    """The federated GatewayBackend (one static target per name) and its policy: tokens
    verified against `key`, calls held to `rules`."""
    listed = "\n".join(
        f"      - {{name: {name}, static: {{host: 127.0.0.1, port: {port}}}}}"
        for name, port in targets.items()
    )
    listed_rules = "\n".join(f"            - '{rule}'" for rule in rules)
    return f"""\
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: federated}}
spec:
  mcp:
    targets:
{listed}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: federated}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [{AUDIENCE}]
          jwks:
            inline: '{json.dumps(jwks_of(key))}'
  backend:
    mcp:
      authorization:
        action: Allow
        policy:
          matchExpressions:
{listed_rules}
"""


def resources(
    gateway_port: int,
    targets: dict[str, int],
    key: RSAKey,
    rules: list[str] = RULES,
    cors_origin: str | None = None,
) -> str:
    """The Gateway, route (with a CORS filter for `cors_origin`), federated GatewayBackend and
    policy, as YAML."""
    return (
        _gateway_and_route(gateway_port, cors_origin)
        + "---\n"
        + _backend_and_policy(targets, key, rules)
    )


@dataclass
class Federated:
    """The gateway in front of the targets, and how to reach and restart them."""

    url: str
    key: RSAKey
    logs: Path
    ports: dict[str, int]
    processes: dict[str, Process] = field(default_factory=dict)
    # The resources file the gateway watches, and its listener port (to write them anew).
    config: Path = Path()
    gateway_port: int = 0
    # The gateway's audit trail (`serve --audit-log`), when it keeps one.
    audit: Path = Path()

    def token(self, *groups: str, sub: str = "alice") -> str:
        """A token the route's policy accepts, for `sub` in `groups`."""
        return mint(self.key, claims_for(ISSUER, AUDIENCE, sub=sub, groups=list(groups)))

    @asynccontextmanager
    async def session(
        self, *groups: str, sub: str = "alice", **callbacks: Any
    ) -> AsyncIterator[ClientSession]:
        """An initialized `mcp` SDK client session through the gateway for `sub` in `groups`
        (`callbacks`: the ClientSession's sampling, elicitation, roots, logging and message
        callbacks)."""
        headers = {"Authorization": f"Bearer {self.token(*groups, sub=sub)}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(self.url, http_client=http) as (read, write, *_),
            ClientSession(read, write, **callbacks) as session,
        ):
            await session.initialize()
            yield session


def config_path(directory: Path) -> Path:
    """Where the gateway's resources are written (it reloads them when they change)."""
    return directory / "federation.yaml"


def start_gateway(
    directory: Path,
    logs: Path,
    port: int,
    targets: dict[str, int],
    key: RSAKey,
    rules: list[str] = RULES,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
):
    """The gateway serving the federated route (a Process; `env` added to its environment,
    `args` to its command line)."""
    config = config_path(directory)
    config.write_text(resources(port, targets, key, rules))
    command = [*gateway_cmd(config), *args]
    process = Process(f"gateway-federation-{port}", command, logs, env=env)
    wait_for_port(port, process)
    return process
