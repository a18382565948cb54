"""Credentials per target of a federated backend, with real processes: the dev IdP in its
Keycloak flavour (standard token exchange), the gateway, and two `mcp` SDK servers that each
validate bearer tokens themselves and accept only their own audience
(tests/peers/mcp_backend_auth.py, with a ledger of the tokens they were sent).

One route serves both as one MCP server; each target's token is exchanged for its own audience
(`spec.backend.credentials.targets[]`), so each server sees a token for itself naming the user,
and neither ever sees the caller's token. A third target whose exchange the provider refuses is
left out of the lists and its call answered with a JSON-RPC error naming it and the refusal,
while the others keep working."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from idp_support import ADMIN_PASSWORD, USER_PASSWORD, start_dev_idp
from support import (
    INITIALIZE,
    PEERS,
    Process,
    free_port,
    gateway_cmd,
    mcp_headers,
    unverified_claims,
    wait_for_keyset,
    wait_for_port,
)

EXCHANGE_SECRET = "exchange-client-secret-for-federation"
REALM = "/realms/master"
# Each target's client at the provider (its tokens' `aud`) and the client scope that grants it.
AUDIENCES = {"search": "search-backend", "tickets": "tickets-backend"}


@dataclass
class Setup:
    idp: str
    gateway: str
    backends: dict[str, str]


def password_token(idp: str, username: str, password: str, **extra: str) -> str:
    """An access token from the realm's password grant (admin-cli), checked."""
    answer = httpx.post(
        f"{idp}{REALM}/protocol/openid-connect/token",
        data={
            "grant_type": "password",
            "client_id": "admin-cli",
            "username": username,
            "password": password,
            **extra,
        },
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _audience_scope(admin: httpx.Client, name: str, audience: str) -> str:
    created = admin.post("/client-scopes", json={"name": name, "protocol": "openid-connect"})
    assert created.status_code == 201, created.text
    scope_id = created.headers["location"].rsplit("/", 1)[1]
    mapper = {
        "name": f"{name}-audience",
        "protocol": "openid-connect",
        "protocolMapper": "oidc-audience-mapper",
        "config": {"included.client.audience": audience, "access.token.claim": "true"},
    }
    made = admin.post(f"/client-scopes/{scope_id}/protocol-mappers/models", json=mapper)
    assert made.status_code == 201, made.text
    return scope_id


def provision(idp: str) -> None:
    """Two backend clients, an exchange client allowed to ask for either audience (an optional
    client scope each), users' tokens naming the exchange client, and alice."""
    token = password_token(idp, "admin", ADMIN_PASSWORD)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{idp}/admin{REALM}", headers=headers) as admin:
        clients = [
            {"clientId": audience, "publicClient": False, "standardFlowEnabled": False}
            for audience in AUDIENCES.values()
        ]
        clients.append(
            {
                "clientId": "gateway-exchange",
                "publicClient": False,
                "secret": EXCHANGE_SECRET,
                "standardFlowEnabled": False,
                "attributes": {"standard.token.exchange.enabled": "true"},
            }
        )
        for body in clients:
            assert admin.post("/clients", json=body).status_code == 201
        default = _audience_scope(admin, "gateway-audience", "gateway-exchange")
        assert admin.put(f"/default-default-client-scopes/{default}").status_code == 204
        exchanger = admin.get("/clients", params={"clientId": "gateway-exchange"}).json()[0]
        for name, audience in AUDIENCES.items():
            scope = _audience_scope(admin, f"{name}-audience", audience)
            assigned = admin.put(f"/clients/{exchanger['id']}/optional-client-scopes/{scope}")
            assert assigned.status_code == 204, assigned.text
        user = {
            "username": "alice",
            "enabled": True,
            "credentials": [{"type": "password", "value": USER_PASSWORD}],
        }
        assert admin.post("/users", json=user).status_code == 201


def _exchange(audience: str, scope: str) -> str:
    return (
        "{clientId: gateway-exchange, clientSecret: {env: EXCHANGE_SECRET}, "
        f"audience: {audience}, scope: {scope}}}"
    )


def resources(port: int, issuer: str, backends: dict[str, int]) -> str:
    """A federated route over the two servers, and `refused` (the search server again) whose
    audience the provider does not know."""
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
      backendRefs: [{{name: tools}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: tools}}
spec:
  mcp:
    targets:
      - {{name: search, static: {{host: 127.0.0.1, port: {backends["search"]}}}}}
      - {{name: tickets, static: {{host: 127.0.0.1, port: {backends["tickets"]}}}}}
      - {{name: refused, static: {{host: 127.0.0.1, port: {backends["search"]}}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: exchange}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {issuer}
          kind: Keycloak
          audiences: [gateway-exchange]
          jwks: {{remote: {{url: {issuer}/protocol/openid-connect/certs}}}}
  backend:
    credentials:
      targets:
        - name: search
          tokenExchange: {_exchange("search-backend", "search-audience")}
        - name: tickets
          tokenExchange: {_exchange("tickets-backend", "tickets-audience")}
        - name: refused
          tokenExchange: {_exchange("no-such-client", "search-audience")}
"""


def _backend(name: str, issuer: str, logs: Path) -> tuple[Process, int]:
    port = free_port()
    args = [
        sys.executable,
        str(PEERS / "mcp_backend_auth.py"),
        str(port),
        issuer,
        f"{issuer}/protocol/openid-connect/certs",
        AUDIENCES[name],
    ]
    process = Process(f"fed-credentials-{name}", args, logs)
    wait_for_port(port, process)
    return process, port


@pytest.fixture(scope="module")
def setup(logs: Path, tmp_path_factory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("federation-credentials")
    idp, url = start_dev_idp("keycloak", logs, tmp / "state.json")
    started = [idp]
    try:
        provision(url)
        issuer = url + REALM
        ports = {}
        for name in AUDIENCES:
            process, ports[name] = _backend(name, issuer, logs)
            started.append(process)
        port = free_port()
        config = tmp / "resources.yaml"
        config.write_text(resources(port, issuer, ports))
        env = {"EXCHANGE_SECRET": EXCHANGE_SECRET}
        gateway = Process("gateway-federation-credentials", gateway_cmd(config), logs, env=env)
        started.append(gateway)
        wait_for_port(port, gateway)
        backends = {name: f"http://127.0.0.1:{p}" for name, p in ports.items()}
        yield Setup(url, f"http://127.0.0.1:{port}", backends)
    finally:
        for process in reversed(started):
            process.stop()


def user_token(setup: Setup) -> str:
    return password_token(setup.idp, "alice", USER_PASSWORD, scope="openid")


def ledger(setup: Setup, name: str) -> list[str]:
    return httpx.get(f"{setup.backends[name]}/debug/tokens").json()


@asynccontextmanager
async def session(setup: Setup, token: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{setup.gateway}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def test_each_target_sees_a_token_of_its_own_audience_never_the_callers(setup):
    token = user_token(setup)
    wait_for_keyset(setup.gateway, token)
    before = {name: len(ledger(setup, name)) for name in AUDIENCES}
    async with session(setup, token) as client:
        tools = sorted(tool.name for tool in (await client.list_tools()).tools)
        # `refused` has no credential: its tools are left out, the others' are all there.
        assert tools == ["search_whoami", "tickets_whoami"]
        seen = {
            name: json.loads((await client.call_tool(f"{name}_whoami", {})).content[0].text)
            for name in AUDIENCES
        }
    for name, audience in AUDIENCES.items():
        assert seen[name]["aud"] == audience, seen
        assert seen[name]["sub"] == unverified_claims(token)["sub"]
        received = ledger(setup, name)[before[name] :]
        assert received, f"{name} was sent no token"
        assert token not in received  # the caller's token never arrives
        audiences = {str(unverified_claims(t)["aud"]) for t in received}
        assert audiences == {audience}, (name, audiences)


async def test_a_refused_exchange_fails_that_targets_call_alone(setup):
    token = user_token(setup)
    wait_for_keyset(setup.gateway, token)
    before = len(ledger(setup, "search"))
    async with session(setup, token) as client:
        with pytest.raises(MCPError, match="'refused' behind this route is unavailable"):
            await client.call_tool("refused_whoami", {})
        # The session and the other targets carry on.
        still = await client.call_tool("tickets_whoami", {})
        assert json.loads(still.content[0].text)["aud"] == "tickets-backend"
    # The raw answer: HTTP 200, JSON-RPC -32603, naming the target and the provider's words.
    headers = {"Authorization": f"Bearer {token}", **mcp_headers()}
    with httpx.Client(base_url=setup.gateway, headers=headers, timeout=30) as http:
        opened = http.post("/mcp", json=INITIALIZE)
        assert opened.status_code == 200, opened.text
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "refused_whoami"},
        }
        sid = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        answer = http.post("/mcp", json=call, headers=sid)
    assert answer.status_code == 200
    error = answer.json()["error"]
    assert error["code"] == -32603
    assert "'refused'" in error["message"]
    assert "the provider refused: invalid_client: Audience not found" in error["message"]
    assert token not in answer.text
    # Nothing went to the server behind `refused` (the search server) but search's own tokens.
    received = ledger(setup, "search")[before:]
    assert {str(unverified_claims(t)["aud"]) for t in received} == {"search-backend"}
