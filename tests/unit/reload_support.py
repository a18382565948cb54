"""A gateway in process over resource files, reloaded through its real file watcher: the route of
`resources_fixture` with its policy's keys given inline, an in-memory backend, and a request
with a token of one of those keys."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from joserfc.jwk import RSAKey

from mcp_oauth_gateway.controlplane import ControlPlane
from mcp_oauth_gateway.controlplane.watch import ConfigWatcher, ReloadCaches, load_into
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
    """The gateway serving `directory` (loaded through its watcher's caches, as `serve` does),
    and its watcher (not polling: tests call `reload`)."""
    caches = ReloadCaches()
    snapshot = load_into([directory], caches)
    assert snapshot.ok, snapshot.errors
    control = ControlPlane(snapshot)
    watcher = ConfigWatcher([str(directory)], control, caches=caches)
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


GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  listeners: [{name: http, port: 8080, protocol: HTTP}]
"""


def tenant(i: int, key: RSAKey, rules: tuple[str, ...]) -> str:
    """Route `/t{i}` of tenant `i`, its backend and its policy (`key`'s keys, `rules` Allow)."""
    expressions = ", ".join(repr(rule) for rule in rules)
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: t{i}}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /t{i}}}}}]
      backendRefs: [{{name: b{i}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: b{i}}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: 9}}}}]}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: p{i}}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: t{i}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [mcp-public]
          jwks: {{inline: '{json.dumps(jwks_of(key))}'}}
    authorization:
      action: Allow
      policy: {{matchExpressions: [{expressions}]}}
"""


def apps_by_route(app: GatewayApp) -> dict[str, object]:
    """Each route's pipeline in the tables the app serves."""
    return {
        entry.route.route: entry.app for table in app.tables.values() for entry in table.entries
    }


async def call_as(app: GatewayApp, key: RSAKey, path: str, groups: tuple[str, ...]) -> int:
    """The status of an MCP request on `path` with a token of `key` for a member of `groups`."""
    token = mint(key, claims_for(ISSUER, "mcp-public", groups=groups))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw.example:8080"
    ) as client:
        response = await client.post(
            path,
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
            headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
        )
    return response.status_code
