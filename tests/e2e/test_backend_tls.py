"""MCP servers over TLS behind the gateway, with real processes on 127.0.0.1: `mcp` SDK servers
served by uvicorn with a certificate of a CA made in the test, the gateway in front (uvloop, as
in production) with `static.tls`, and the `mcp` SDK client through it. The certificate is always
verified: one not for the server name, not issued by a trusted CA, or no TLS at all is a 502
saying why, and a `caFile` that holds no certificate refuses its backend at load."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest
from joserfc.jwk import RSAKey
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from support import (
    INITIALIZE,
    PEERS,
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    jwks_of,
    mcp_headers,
    mint,
    new_key,
    wait_for_port,
)
from tls_support import TestCa

ISSUER = "http://idp.tls.test/"
AUDIENCE = "mcp-tls"
NAME = "mcp.tls.test"  # the only name the server's certificate holds (not 127.0.0.1)
NOT_PEM_FIELD = "spec.mcp.targets[0].static.tls.caFile"


@dataclass
class World:
    gateway: str
    key: RSAKey
    config: Path
    tls_port: int
    plain_port: int

    def token(self) -> str:
        return mint(self.key, claims_for(ISSUER, AUDIENCE))

    def post(self, path: str) -> httpx.Response:
        return httpx.post(
            f"{self.gateway}{path}", json=INITIALIZE, headers=mcp_headers(self.token()), timeout=30
        )


def _target(name: str, port: int, tls: str | None = None) -> str:
    """One target (YAML flow mapping) at 127.0.0.1:`port`, with `tls` when given."""
    over = "" if tls is None else f", tls: {{{tls}}}"
    return f"{{name: {name}, static: {{host: 127.0.0.1, port: {port}{over}}}}}"


def _targets(tls_port: int, plain_port: int, files: dict[str, Path]) -> dict[str, str]:
    """Route path → its backend's targets (YAML flow sequences)."""
    ca, other = files["ca"], files["other"]
    good = _target("a", tls_port, f"caFile: {ca}, serverName: {NAME}")
    return {
        "mcp": f"[{good}]",
        "fed": f"[{good}, {_target('b', plain_port)}]",
        # The default server name is the host, 127.0.0.1, which the certificate does not hold.
        "wrong-name": f"[{_target('t', tls_port, f'caFile: {ca}')}]",
        # The system's CAs, which never issued the test's certificate.
        "untrusted": f"[{_target('t', tls_port, f'serverName: {NAME}')}]",
        # The same address as /mcp, trusting another CA: it must not get /mcp's connections.
        "other-ca": f"[{_target('t', tls_port, f'caFile: {other}, serverName: {NAME}')}]",
        "no-tls-there": f"[{_target('t', plain_port, '')}]",
        "fed-untrusted": f"[{_target('a', tls_port, f'serverName: {NAME}')}, "
        f"{_target('b', plain_port)}]",
    }


def resources(port: int, key: RSAKey, targets: dict[str, str]) -> str:
    """A Gateway, a route and a backend per path, one policy over every route."""
    documents = [
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw}\n"
        f"spec:\n  listeners: [{{name: http, port: {port}, protocol: HTTP}}]\n"
    ]
    for path, listed in targets.items():
        documents.append(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
            f"metadata: {{name: {path}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n"
            f"    - matches: [{{path: {{type: PathPrefix, value: /{path}}}}}]\n"
            "      backendRefs: [{group: mcp-oauth-gateway.dev, kind: GatewayBackend, "
            f"name: {path}}}]\n      timeouts: {{backendRequest: 20s}}\n"
        )
        documents.append(
            "apiVersion: mcp-oauth-gateway.dev/v1alpha1\nkind: GatewayBackend\n"
            f"metadata: {{name: {path}}}\nspec:\n  mcp:\n    targets: {listed}\n"
        )
    refs = ", ".join(
        f"{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {p}}}" for p in targets
    )
    documents.append(
        "apiVersion: mcp-oauth-gateway.dev/v1alpha1\nkind: GatewayPolicy\n"
        f"metadata: {{name: tls}}\nspec:\n  targetRefs: [{refs}]\n  traffic:\n"
        f"    jwtAuthentication:\n      providers:\n        - issuer: {ISSUER}\n"
        f"          audiences: [{AUDIENCE}]\n"
        f"          jwks: {{inline: '{json.dumps(jwks_of(key))}'}}\n"
    )
    return "---\n".join(documents)


def _server(name: str, port: int, logs: Path, *tls: Path) -> Process:
    args = [sys.executable, str(PEERS / "mcp_named.py"), name, str(port)]
    if tls:
        args += ["--tls", *map(str, tls)]
    process = Process(f"tls-backend-{name}-{port}", args, logs)
    wait_for_port(port, process)
    return process


@pytest.fixture(scope="module")
def world(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("backend-tls")
    ca = TestCa("backend TLS test CA")
    server = ca.issue(tmp, "server", NAME)
    files = {
        "ca": ca.write(tmp / "ca.pem"),
        "other": TestCa("another CA").write(tmp / "other-ca.pem"),
    }
    tls_port, plain_port, port = free_port(), free_port(), free_port()
    key = new_key("tls-test")
    config = tmp / "resources.yaml"
    config.write_text(resources(port, key, _targets(tls_port, plain_port, files)))
    processes = [
        _server("a", tls_port, logs, server.cert, server.key),
        _server("b", plain_port, logs),
    ]
    try:
        processes.append(Process("gateway-backend-tls", gateway_cmd(config), logs))
        wait_for_port(port, processes[-1])
        yield World(f"http://127.0.0.1:{port}", key, config, tls_port, plain_port)
    finally:
        for process in reversed(processes):
            process.stop()


async def _session_text(world: World, path: str, tool: str, arguments: dict) -> tuple[list, str]:
    """The tool names a client sees on `path`, and the text `tool` answers."""
    headers = {"Authorization": f"Bearer {world.token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{world.gateway}{path}", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        names = sorted(t.name for t in (await session.list_tools()).tools)
        result = await session.call_tool(tool, arguments)
    assert not result.is_error, result
    (content,) = result.content
    assert isinstance(content, TextContent)
    return names, content.text


async def test_a_tool_is_called_through_the_gateway_over_tls(world):
    # The server's SDK refuses a Host header that is not 127.0.0.1:<port> (its DNS rebinding
    # protection): the call working also says the Host is the target's address, not its name.
    names, text = await _session_text(world, "/mcp", "add", {"a": 2, "b": 3})
    assert names == ["add", "count", "whoami"]
    assert text == "5"


async def test_a_federated_route_reaches_its_tls_target_beside_a_plain_one(world):
    names, text = await _session_text(world, "/fed", "a_whoami", {})
    assert names == ["a_add", "a_count", "a_whoami", "b_add", "b_count", "b_whoami"]
    assert text == "a"


async def test_a_federated_target_whose_certificate_is_not_trusted_is_left_out_saying_why(world):
    headers = {"Authorization": f"Bearer {world.token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{world.gateway}/fed-untrusted", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        names = sorted(t.name for t in (await session.list_tools()).tools)
        with pytest.raises(MCPError) as refused:
            await session.call_tool("a_whoami", {})
    assert names == ["b_add", "b_count", "b_whoami"]
    assert "certificate verify failed: unable to get local issuer certificate" in str(refused.value)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("wrong-name", "certificate verify failed: IP address mismatch"),
        ("untrusted", "certificate verify failed: unable to get local issuer certificate"),
        ("other-ca", "certificate verify failed: unable to get local issuer certificate"),
        ("no-tls-there", "wrong version number"),
    ],
)
def test_a_server_whose_certificate_is_not_verified_is_a_502_saying_why(world, path, why):
    # /mcp first: its verified connection to the same address is then idle in the pool.
    assert world.post("/mcp").status_code == 200
    response = world.post(f"/{path}")
    port = world.plain_port if path == "no-tls-there" else world.tls_port
    assert response.status_code == 502, response.text
    description = response.json()["error_description"]
    handshake = f"the TLS handshake with 127.0.0.1:{port} failed: {why}"
    assert description.startswith(f"the MCP backend 127.0.0.1:{port} is unreachable: {handshake}")


@pytest.mark.parametrize("command", ["serve", "check"])
def test_a_ca_file_without_a_certificate_is_refused_at_load(tmp_path, command):
    """`serve` does not start and `check` fails, both naming the field and the fix."""
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("this is not a certificate\n")
    target = f"[{_target('t', 9, f'caFile: {not_pem}')}]"
    config = tmp_path / "resources.yaml"
    config.write_text(resources(free_port(), new_key("k"), {"mcp": target}))
    run = subprocess.run(
        [sys.executable, "-m", "mcp_oauth_gateway", command, "-f", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert (
        f"GatewayBackend default/mcp is not served: {NOT_PEM_FIELD}: file {not_pem} holds no "
        "readable PEM certificate; give the CA certificates to trust"
    ) in run.stdout + run.stderr
