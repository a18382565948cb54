"""A gateway serving a third-party MCP server through `userOAuth`, for the end-to-end tests of
users' own sign-in (issue 36): the route's own identity provider is npm oidc-provider
(tests/node/idp.mjs, Keycloak layout; the connect pages' sign-in goes through it as
`mcp-public`), the upstream is one of `upstream_servers_support`'s pairs (a real MCP server
that enforces its own OAuth, with its own real authorization server).

`user_oauth_gateway(...)` starts the route IdP and the gateway for an upstream made by
`upstreams(redirect_uris=[callback_url(port)])` (the upstream must know the gateway's
callback before the gateway starts: take the port first with `free_port`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from joserfc.jwk import RSAKey
from mcp import MCPError
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from connect_flow import Jar, Login
from support import (
    NODE_DIR,
    Process,
    claims_for,
    free_port,
    mint,
    node,
    wait_for_keyset,
    wait_for_port,
)
from upstream_servers_support import Upstream

CLIENT_ID = "mcp-public"
UPSTREAM_SECRET_FILE = "upstream-client-secret"


def first_mcp_error(group: BaseExceptionGroup) -> MCPError | None:
    """The MCP error a client raised from inside its task group, if that is what it was."""
    matched, _ = group.split(MCPError)
    if matched is None:
        return None
    first: BaseException = matched.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    assert isinstance(first, MCPError)
    return first


async def call_tool(
    url: str, token: str, tool: str, mode: str = "legacy", listed: bool = False
) -> tuple[list[str], dict]:
    """One tool call with the Python `mcp` client (after a tools/list when `listed`): the tools
    listed and the call's JSON text; MCPError when the gateway answers with one."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    transport = streamable_http_client(url, http_client=http)
    try:
        async with http, Client(transport, mode=mode) as client:
            tools = [t.name for t in (await client.list_tools()).tools] if listed else []
            result = await client.call_tool(tool, {})
    except BaseExceptionGroup as group:
        error = first_mcp_error(group)
        if error is None:
            raise
        raise error from None
    return tools, json.loads(result.content[0].text)  # type: ignore[union-attr]


def callback_url(gateway_port: int) -> str:
    """The redirect URI the upstream AS must allow for a gateway on `gateway_port`."""
    return f"http://127.0.0.1:{gateway_port}/mcp/connect/callback"


def new_key_line() -> str:
    """A fresh user-token key, as the operator makes one."""
    made = subprocess.run(
        [sys.executable, "-m", "mcp_oauth_gateway", "grants", "new-key"],
        capture_output=True,
        text=True,
        check=True,
    )
    return made.stdout.strip()


def write_key_file(path: Path, *lines: str) -> Path:
    """A key file holding `lines` (the first seals), readable by its owner only."""
    path.write_text("".join(f"{line}\n" for line in lines))
    path.chmod(0o600)
    return path


def _targets_and_credentials(
    upstream: Upstream, secret_file: Path, local: str | None
) -> tuple[str, str]:
    """The backend's target lines after the upstream's (`local`'s, if any) and its credentials:
    userOAuth for the whole backend, or with `local` for the upstream's target only."""
    client = upstream.auth.confidential
    scopes = ", ".join(upstream.auth.scopes)
    fields = [
        f"clientId: {client.client_id}",
        f"clientSecret: {{file: {secret_file}}}",
        f"scopes: [{scopes}]",
        "displayName: Upstream Notes",
    ]
    if local is None:
        return "", "      userOAuth:\n" + "".join(f"        {f}\n" for f in fields)
    local_host, _, local_port = local.partition(":")
    second = (
        f"      - name: local\n        static: {{host: {local_host}, port: {local_port}, "
        "path: /mcp}\n"
    )
    credentials = (
        f"      targets:\n        - name: {upstream.name}\n          userOAuth:\n"
        + "".join(f"            {f}\n" for f in fields)
    )
    return second, credentials


def _routing(gateway_port: int, upstream: Upstream, second: str) -> str:
    """The Gateway, the route and the backend: the upstream's target, then `second`."""
    target = upstream.server.url.removeprefix("http://")
    host_port, _, path = target.partition("/")
    host, _, port = host_port.partition(":")
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: mcp-oauth-gateway
  listeners: [{{name: http, port: {gateway_port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches:
        - path: {{type: PathPrefix, value: /mcp}}
        - path: {{type: PathPrefix, value: /.well-known/oauth-protected-resource/mcp}}
      backendRefs:
        - {{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: upstream}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: upstream, namespace: default}}
spec:
  mcp:
    targets:
      - name: {upstream.name}
        static: {{host: {host}, port: {port}, path: /{path}}}
{second}"""


def _policy(gateway_port: int, idp_port: int, credentials: str) -> str:
    """The route's policy: the route IdP's tokens for the gateway's resource, then
    `credentials` for the backend."""
    issuer = f"http://127.0.0.1:{idp_port}/realms/master"
    resource = f"http://127.0.0.1:{gateway_port}/mcp"
    return f"""\
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: upstream-users, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {issuer}
          audiences: [{resource}]
          jwks: {{remote: {{url: {issuer}/protocol/openid-connect/certs}}}}
      mcp:
        provider: Keycloak
        clientId: {CLIENT_ID}
        resourceMetadata: {{resource: {resource}}}
  backend:
    credentials:
{credentials}
"""


def resources(
    gateway_port: int,
    idp_port: int,
    upstream: Upstream,
    secret_file: Path,
    local: str | None = None,
) -> str:
    """The gateway's resources: one route to the upstream, its policy with userOAuth; with
    `local` (host:port of a plain MCP server), a federated backend of both, userOAuth for the
    upstream's target only."""
    second, credentials = _targets_and_credentials(upstream, secret_file, local)
    return (
        _routing(gateway_port, upstream, second)
        + "---\n"
        + _policy(gateway_port, idp_port, credentials)
    )


@dataclass
class UserOAuthGateway:
    """The running gateway, its route IdP and the upstream behind it."""

    gateway: str
    idp: str
    issuer: str
    key: RSAKey
    upstream: Upstream
    process: Process
    config: Path
    key_file: Path
    store: str
    status: str
    jars: dict[str, Jar] = field(default_factory=dict)

    @property
    def mcp(self) -> str:
        """The MCP URL clients use."""
        return f"{self.gateway}/mcp"

    def token(self, sub: str = "alice", **claims: object) -> str:
        """A caller's access token at the route (as the route IdP would issue it)."""
        made = claims_for(self.issuer, self.mcp)
        made.update({"sub": sub, **claims})
        return mint(self.key, made)

    def route_login(self, user: str) -> Login:
        """What `user` types at the route's IdP."""
        return Login(user, "x", self.idp)

    def upstream_login(self, user: str) -> Login:
        """What `user` types at the upstream's AS."""
        return self.upstream.auth.login(user)

    def jar(self, user: str) -> Jar:
        """`user`'s browser (its cookies kept across flows)."""
        return self.jars.setdefault(user, Jar())


@contextmanager
def route_idp(logs: Path, key_file: Path, gateway_port: int) -> Iterator[str]:
    """The route's IdP (oidc-provider, Keycloak layout) whose public client may come back to
    the gateway's connect pages; yields its origin."""
    port = free_port()
    env = {
        "IDP_PORT": str(port),
        "FLAVOUR": "keycloak",
        "KEY_FILE": str(key_file),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"http://127.0.0.1:{gateway_port}/mcp",
        "SLUG": "mcp",
        "CALLBACK_PATHS": "/mcp/connect/signed-in",
    }
    idp = Process(f"route-idp-{port}", [node(), str(NODE_DIR / "idp.mjs")], logs, env=env)
    try:
        wait_for_port(port, idp)
        yield f"http://127.0.0.1:{port}"
    finally:
        idp.stop()


@contextmanager
def user_oauth_gateway(
    logs: Path,
    directory: Path,
    idp_key: tuple[RSAKey, Path],
    upstream: Upstream,
    gateway_port: int,
    *,
    idp: str,
    key_file: Path | None = None,
    store: str | None = None,
    extra_args: tuple[str, ...] = (),
    name: str = "gateway-user-oauth",
    local: str | None = None,
) -> Iterator[UserOAuthGateway]:
    """The gateway on `gateway_port` in front of `upstream`, its route IdP at `idp`."""
    directory.mkdir(parents=True, exist_ok=True)
    secret = directory / UPSTREAM_SECRET_FILE
    secret.write_text(upstream.auth.confidential.client_secret or "")
    config = directory / "resources"
    config.mkdir(exist_ok=True)
    idp_port = int(idp.rsplit(":", 1)[1])
    written = resources(gateway_port, idp_port, upstream, secret, local)
    (config / "gateway.yaml").write_text(written)
    key_file = key_file or write_key_file(directory / "user-token.key", new_key_line())
    store = store or f"sqlite://{directory / 'user-tokens.db'}"
    status_port = free_port()
    command = [
        *(sys.executable, "-m", "mcp_oauth_gateway", "serve", "-f", str(config)),
        *("--status-port", str(status_port)),
        *("--user-token-key", str(key_file), "--user-token-store", store),
        *("--audit-log", str(directory / "audit.jsonl")),
        *extra_args,
    ]
    process = Process(name, command, logs)
    try:
        wait_for_port(gateway_port, process)
        gateway, status = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{status_port}"
        issuer = f"{idp}/realms/master"
        setup = UserOAuthGateway(
            gateway, idp, issuer, idp_key[0], upstream, process, config, key_file, store, status
        )
        wait_for_keyset(setup.gateway, setup.token())
        yield setup
    finally:
        process.stop()
