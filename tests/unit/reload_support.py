"""A gateway in process over resource files, reloaded through its real file watcher: the route of
`resources_fixture` with its policy's keys given inline, an in-memory backend, and a request
with a token of one of those keys."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from joserfc.jwk import RSAKey

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.watch import ConfigWatcher
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from support import claims_for, jwks_of, mint
from unit.resources_fixture import BASE, policy
from unit.stages.harness import MemoryUpstream

ISSUER = "http://idp/application/o/mcp/"
REMOTE = (
    "          jwks:\n            remote:\n              backendRef: {name: authentik, port: 9000}"
    "\n              jwksPath: /application/o/mcp/jwks/"
)


def inline_policy(*keys: RSAKey, rules: tuple[str, ...] = ('"mcp-agent" in jwt.groups',)) -> str:
    """The fixture's policy, its provider's keys given inline."""
    inline = f"          jwks:\n            inline: '{json.dumps(jwks_of(*keys))}'"
    return policy(rules=rules).replace(REMOTE, inline)


def write_config(directory: Path, policy_text: str) -> Path:
    """The resources in `directory`: the Gateway, route, backend and Service, and the policy."""
    directory.mkdir(exist_ok=True)
    (directory / "base.yaml").write_text(BASE)
    (directory / "policy.yaml").write_text(policy_text)
    return directory


def watched_app(directory: Path) -> tuple[GatewayApp, ConfigWatcher]:
    """The gateway serving `directory`, and its watcher (not polling: tests call `reload`)."""
    snapshot = build_snapshot(load_paths([directory]))
    assert snapshot.ok, snapshot.errors
    control = ControlPlane(snapshot)
    watcher = ConfigWatcher([str(directory)], control)
    return GatewayApp(control, upstream=MemoryUpstream(), watcher=watcher), watcher


async def call_with(app: GatewayApp, key: RSAKey) -> httpx.Response:
    """An MCP request with a token signed by `key`."""
    token = mint(key, claims_for(ISSUER, "mcp-public"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw.example:8080"
    ) as client:
        return await client.post(
            "/mcp",
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
            headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
        )
