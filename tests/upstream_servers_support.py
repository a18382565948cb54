"""Third-party MCP servers that enforce their own OAuth, each with its own authorization server
(AS), for the tests of users' own sign-in (`userOAuth`): the servers are not ours and trust
only their AS, never the gateway.

- Servers: FastMCP (tests/peers/upstream_fastmcp.py) and the TypeScript SDK 1.x
  (tests/node/ts_oauth_backend.mjs), each with its library's own bearer middleware and RFC 9728
  metadata; tools `whoami` and `echo`; `GET /debug/tokens` lists the tokens they were sent.
- Authorization servers: npm oidc-provider and real Keycloak (upstream_as_support).
- `upstream(...)` starts a pair (any server with any AS); `UPSTREAM_PAIRS` names the usual two.
- The OAuth client side a test needs without the gateway: `code_flow` (authorization code +
  PKCE through the AS's own pages), `refresh`, `revoke`; and MCP calls with a token in hand
  (`py_whoami` with the Python `mcp` client, `ts_whoami` with the TypeScript one).
The browser driver for the gateway's connect pages is `connect_flow.drive_connect`."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import secrets
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from connect_flow import Page, browse
from node_clients import run_ts_bearer_client
from support import (
    INITIALIZE,
    NODE_DIR,
    PEERS,
    Process,
    free_port,
    mcp_headers,
    node,
    wait_for_port,
)
from upstream_as_support import (
    AuthServer,
    KeycloakAS,
    OAuthClient,
    OidcProviderAS,
    keycloak_as,
    oidc_provider_as,
)

SERVERS = ("fastmcp", "ts")
AUTH_SERVERS = ("oidc-provider", "keycloak")
# The two pairs the tests of issue 36 run: each server with its own kind of AS.
UPSTREAM_PAIRS = (("fastmcp", "oidc-provider"), ("ts", "keycloak"))
# A redirect URI the tests' own OAuth client stops at (nothing listens there).
TEST_REDIRECT = "http://127.0.0.1:47123/upstream-test-callback"
_REALMS = itertools.count(1)


@dataclass
class UpstreamServer:
    """A third-party MCP server, running."""

    kind: str
    url: str  # its MCP endpoint, http://127.0.0.1:PORT/mcp (also its RFC 8707 resource)
    verify: str  # "jwt", "introspection" or "jwt+introspection"
    process: Process

    @property
    def origin(self) -> str:
        return self.url.removesuffix("/mcp")

    @property
    def resource_metadata_url(self) -> str:
        """Its RFC 9728 document (path form)."""
        return f"{self.origin}/.well-known/oauth-protected-resource/mcp"

    def tokens_received(self) -> list[str]:
        """Every bearer token that reached its /mcp, oldest first."""
        found: list[str] = httpx.get(f"{self.origin}/debug/tokens", timeout=10).json()
        return found


@dataclass
class Upstream:
    """An MCP server with its own AS: what a `userOAuth` backend points at."""

    server: UpstreamServer
    auth: AuthServer

    @property
    def name(self) -> str:
        return f"{self.server.kind}-{self.auth.kind}"


def default_verify(auth: str, token_format: str) -> str:
    """How a server checks the tokens of this kind of AS: Keycloak introspects its JWTs (a
    revoked grant is refused at once); oidc-provider introspects only opaque tokens."""
    if auth == "keycloak":
        return "jwt+introspection"
    return "introspection" if token_format == "opaque" else "jwt"


def _server_config(port: int, auth: AuthServer, verify: str) -> dict[str, Any]:
    return {
        "port": port,
        "issuer": auth.issuer,
        "jwks_uri": auth.endpoint("jwks"),
        "scopes": list(auth.scopes[:1]),  # mcp:read: required of every request
        "verify": verify,
        "introspection_url": auth.endpoint("introspection"),
        "client_id": auth.resource_server.client_id,
        "client_secret": auth.resource_server.client_secret,
    }


@contextmanager
def upstream_server(
    kind: str, port: int, auth: AuthServer, verify: str, logs: Path, directory: Path
) -> Iterator[UpstreamServer]:
    """The `kind` MCP server on `port`, trusting `auth`; stopped on exit."""
    assert kind in SERVERS, kind
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / f"upstream-{kind}-{port}.json"
    config.write_text(json.dumps(_server_config(port, auth, verify)))
    name = f"upstream-{kind}-{port}"
    if kind == "fastmcp":
        command = [sys.executable, str(PEERS / "upstream_fastmcp.py"), str(config)]
        process = Process(name, command, logs)
    else:
        command = [node(), str(NODE_DIR / "ts_oauth_backend.mjs")]
        process = Process(name, command, logs, env={"CONFIG": str(config)}, cwd=NODE_DIR)
    try:
        wait_for_port(port, process)
        yield UpstreamServer(kind, f"http://127.0.0.1:{port}/mcp", verify, process)
    finally:
        process.stop()


@contextmanager
def upstream(
    logs: Path,
    directory: Path,
    server: str = "fastmcp",
    auth: str = "oidc-provider",
    redirect_uris: Sequence[str] = (),
    keycloak: Any = None,
    token_format: str = "jwt",
    verify: str | None = None,
    access_token_ttl: int | None = None,
    realm: str | None = None,
    issuer_path: str = "",
    confidential_auth: str = "client_secret_basic",
) -> Iterator[Upstream]:
    """A third-party MCP server (`server`: fastmcp | ts) with its own AS (`auth`: oidc-provider
    | keycloak, the latter a realm of `keycloak`, the session's `real_keycloak`), the AS's
    clients redirecting to `redirect_uris` (the gateway's `<mcp path>/connect/callback`s) and
    to TEST_REDIRECT. oidc-provider issues `token_format` tokens ("jwt" or "opaque").
    `verify` overrides how the server checks tokens (`default_verify`); `issuer_path` gives
    oidc-provider's issuer a path (`http://127.0.0.1:PORT/<path>`), as multi-tenant ASs have;
    `confidential_auth` is the confidential client's registered token endpoint auth method
    (client_secret_basic or client_secret_post; both ASs take either for a client secret)."""
    assert auth in AUTH_SERVERS, auth
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    redirects = [*redirect_uris, TEST_REDIRECT]
    if auth == "oidc-provider":
        starting = oidc_provider_as(
            logs,
            directory,
            resource,
            redirects,
            token_format,
            access_token_ttl or 3600,
            issuer_path,
            name=f"upstream-as-{port}",
            confidential_auth=confidential_auth,
        )
    else:
        assert keycloak is not None, "a Keycloak AS needs the session's real_keycloak"
        realm = realm or f"upstream-{next(_REALMS)}"
        starting = keycloak_as(keycloak, resource, redirects, realm, access_token_ttl or 300)
    with starting as authorization_server:
        checks = verify or default_verify(auth, token_format)
        with upstream_server(server, port, authorization_server, checks, logs, directory) as mcp:
            yield Upstream(mcp, authorization_server)


# The OAuth client side, without the gateway.


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of `verifier`."""
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _client_auth(client: OAuthClient, form: dict[str, str]) -> dict[str, Any]:
    """The token request's client authentication: the client's method (HTTP Basic, or the
    secret in the form), or only client_id for a public one."""
    if client.public:
        return {"data": {**form, "client_id": client.client_id}}
    assert client.client_secret is not None
    if client.auth_method == "client_secret_post":
        return {
            "data": {**form, "client_id": client.client_id, "client_secret": client.client_secret}
        }
    return {"data": form, "auth": (client.client_id, client.client_secret)}


def authorize(
    auth: AuthServer,
    client: OAuthClient,
    user: str,
    resource: str,
    redirect_uri: str = TEST_REDIRECT,
    password: str | None = None,
    say_yes: bool = True,
) -> tuple[Page, str, str]:
    """The AS's sign-in (its own pages, as a person fills them) up to its redirect to
    `redirect_uri`: (the page stopped at, the PKCE verifier, the state sent)."""
    verifier, state = secrets.token_urlsafe(48), secrets.token_urlsafe(16)
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": s256(verifier),
        "code_challenge_method": "S256",
        "scope": " ".join(auth.scopes),
        "resource": resource,
    }
    url = f"{auth.endpoint('authorization')}?{urlencode(params)}"
    page = browse(url, [auth.login(user, password)], stop_at=redirect_uri, say_yes=say_yes)
    return page, verifier, state


def code_flow(
    auth: AuthServer,
    client: OAuthClient,
    user: str,
    resource: str,
    redirect_uri: str = TEST_REDIRECT,
) -> dict[str, Any]:
    """Authorization code + PKCE for `user` at `auth`, then the code redeemed: the AS's token
    response. Checks what a careful client checks: `state` and RFC 9207 `iss`."""
    page, verifier, state = authorize(auth, client, user, resource, redirect_uri)
    answer = page.query
    assert page.status == 0, f"the sign-in did not come back: {page.url} {page.text[:500]}"
    assert answer.get("state") == state, answer
    assert answer.get("iss") == auth.issuer, answer
    form = {
        "grant_type": "authorization_code",
        "code": answer["code"],
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        "resource": resource,
    }
    response = httpx.post(auth.endpoint("token"), timeout=30, **_client_auth(client, form))
    assert response.status_code == 200, response.text
    tokens: dict[str, Any] = response.json()
    return tokens


def refresh(
    auth: AuthServer, client: OAuthClient, refresh_token: str, resource: str | None = None
) -> httpx.Response:
    """A refresh_token grant, as the AS answers it."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    if resource is not None:
        form["resource"] = resource
    return httpx.post(auth.endpoint("token"), timeout=30, **_client_auth(client, form))


def revoke(auth: AuthServer, client: OAuthClient, token: str, hint: str) -> httpx.Response:
    """RFC 7009 revocation of `token`, as the AS answers it."""
    form = {"token": token, "token_type_hint": hint}
    return httpx.post(auth.endpoint("revocation"), timeout=30, **_client_auth(client, form))


def introspect(auth: AuthServer, token: str) -> dict[str, Any]:
    """RFC 7662 introspection by the MCP server's own client."""
    client = auth.resource_server
    assert client.client_secret is not None
    answer = httpx.post(
        auth.endpoint("introspection"),
        data={"token": token},
        auth=(client.client_id, client.client_secret),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


# MCP calls with a token in hand.


async def py_whoami(url: str, token: str) -> dict[str, Any]:
    """`whoami` through the Python `mcp` client (one session: initialize, tools/list, call)."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        tools = await client.list_tools()
        assert {"whoami", "echo"} <= {tool.name for tool in tools.tools}, tools
        result = await client.call_tool("whoami", {})
    found: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return found


def ts_whoami(url: str, token: str) -> dict[str, Any]:
    """`whoami` through the TypeScript SDK client (tests/node/ts_bearer_client.mjs)."""
    report = run_ts_bearer_client(url, token, "whoami")
    assert {"whoami", "echo"} <= set(report["tools"]), report
    found: dict[str, Any] = json.loads(report["called"][0]["text"])
    return found


def initialize(url: str, token: str | None = None) -> httpx.Response:
    """An MCP initialize with `token` (or none), as a client's first request."""
    return httpx.post(url, json=INITIALIZE, headers=mcp_headers(token), timeout=30)


__all__ = [
    "AUTH_SERVERS",
    "SERVERS",
    "TEST_REDIRECT",
    "UPSTREAM_PAIRS",
    "AuthServer",
    "KeycloakAS",
    "OidcProviderAS",
    "Upstream",
    "UpstreamServer",
    "code_flow",
    "initialize",
    "introspect",
    "py_whoami",
    "refresh",
    "revoke",
    "ts_whoami",
    "upstream",
]
