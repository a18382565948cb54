"""Real upstreams for the tests of the gateway as each user's OAuth client (`useroauth`): the
npm `oidc-provider` (tests/node/idp.mjs) as a third-party authorization server, and a real MCP
server that enforces its own OAuth (tests/peers/mcp_backend_auth.py: the `mcp` SDK's bearer
middleware and its RFC 9728 metadata naming that server), each on a free loopback port; and the
user's sign-in at the upstream, completed on the provider's own pages.

The lead may move these beside the harness's upstream servers (tests/node/ts_oauth_backend.mjs
and the FastMCP one) once both are merged."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from headless_login import sign_in

from support import NODE_DIR, PEERS, Process, free_port, node, wait_for_port

CLIENT_ID = "mcp-public"  # the public client tests/node/idp.mjs registers
REDIRECT = "http://127.0.0.1/callback"  # one of its redirect URIs
USER = "alice"


@dataclass(frozen=True)
class Upstream:
    """An authorization server (oidc-provider) and, when started, the MCP server it guards."""

    base: str  # http://127.0.0.1:PORT
    issuer: str
    jwks: str
    backend: str | None = None  # the MCP endpoint URL, e.g. http://127.0.0.1:PORT/mcp

    @property
    def backend_base(self) -> str:
        assert self.backend is not None
        return self.backend.removesuffix("/mcp")


@contextmanager
def oidc_provider(
    logs: Path, key_file: Path, flavour: str, resource: str, name: str
) -> Iterator[Upstream]:
    """tests/node/idp.mjs in `flavour` ("keycloak": issuer .../realms/master, aud = `resource`;
    "authentik": issuer .../application/o/mcp/ with its trailing slash, aud = client id)."""
    port = free_port()
    env = {
        "IDP_PORT": str(port),
        "FLAVOUR": flavour,
        "KEY_FILE": str(key_file),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": resource,
        "SLUG": "mcp",
    }
    process = Process(name, [node(), str(NODE_DIR / "idp.mjs")], logs, env=env, cwd=NODE_DIR)
    try:
        wait_for_port(port, process)
        base = f"http://127.0.0.1:{port}"
        if flavour == "keycloak":
            issuer = f"{base}/realms/master"
            jwks = f"{issuer}/protocol/openid-connect/certs"
        else:
            issuer = f"{base}/application/o/mcp/"
            jwks = f"{issuer}jwks/"
        yield Upstream(base, issuer, jwks)
    finally:
        process.stop()


@contextmanager
def guarded_backend(logs: Path, key_file: Path) -> Iterator[Upstream]:
    """A real MCP server whose tokens come from its own oidc-provider: its 401 names its RFC
    9728 metadata, which names that provider's issuer."""
    port = free_port()
    mcp = f"http://127.0.0.1:{port}/mcp"
    with oidc_provider(logs, key_file, "keycloak", mcp, "useroauth-idp") as upstream:
        command = [sys.executable, str(PEERS / "mcp_backend_auth.py"), str(port)]
        command += [upstream.issuer, upstream.jwks, mcp]
        process = Process("useroauth-backend", command, logs)
        try:
            wait_for_port(port, process)
            yield Upstream(upstream.base, upstream.issuer, upstream.jwks, mcp)
        finally:
            process.stop()


async def user_signs_in(
    url: str, user: str = USER, password: str = "any-password", redirect: str = REDIRECT
) -> dict[str, str]:
    """The user's browser from the authorization URL to the redirect back (login and consent
    filled in on the provider's pages): the query it carries (code, state, iss…)."""
    return await sign_in(url, user, password, redirect)


def new_session() -> aiohttp.ClientSession:
    """A client session like the gateway's own (no cookies kept)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
