"""A whole gateway in process with its audit trail on (`--audit-log` to a file) in front of an
in-memory backend: a route whose policy has CEL rules, a tool rule, an item scope and a secret
header for the backend, so every refusing stage can be met; and the lines it wrote, read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from support import claims_for, jwks_of, mint, new_key
from unit.resources_fixture import BASE, policy, write
from unit.stages.harness import MemoryUpstream

ISSUER = "http://idp/application/o/mcp/"
KEY = new_key("k1")
BACKEND_SECRET = "backend-s3cret-value-7f3a"
EXTRA = """\
  backend:
    credentials:
      secretHeader:
        header: X-Api-Key
        value: {env: AUDIT_TEST_BACKEND_SECRET}
    mcp:
      scopes:
        - match: mcp.tool.name == "purge"
          required: [mcp:admin]
      authorization:
        action: Allow
        policy:
          matchExpressions: ['mcp.tool.name in ["echo", "purge"]']
"""
REMOTE = (
    "          jwks:\n            remote:\n              backendRef: {name: authentik, port: 9000}"
    "\n              jwksPath: /application/o/mcp/jwks/"
)


def audited_app(
    directory: Path, monkeypatch: Any, **options: Any
) -> tuple[GatewayApp, MemoryUpstream, Path]:
    """The gateway, its in-memory backend and its audit file."""
    monkeypatch.setenv("AUDIT_TEST_BACKEND_SECRET", BACKEND_SECRET)
    inline = f"          jwks:\n            inline: '{json.dumps(jwks_of(KEY))}'"
    text = (BASE + policy() + EXTRA).replace(REMOTE, inline)
    snapshot = build_snapshot(load_paths([write(directory, text)]))
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    assert route.policy.invalid is None, route.policy.invalid
    upstream = MemoryUpstream()
    path = directory / "audit.log"
    serve = ServeOptions(audit_log=str(path), **options)
    return GatewayApp(ControlPlane(snapshot), serve, upstream=upstream), upstream, path


def token(**claims: object) -> str:
    """A token the route accepts (claims overridden by `claims`)."""
    return mint(KEY, claims_for(ISSUER, "mcp-public", **claims))


def call(tool: str, request_id: int = 1) -> bytes:
    """A `tools/call` body."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool}}
    ).encode()


async def request(
    app: GatewayApp,
    method: str = "POST",
    path: str = "/mcp",
    body: bytes = b"",
    headers: list[tuple[str, str]] | None = None,
) -> httpx.Response:
    """One request through the whole gateway."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw.example:8080"
    ) as client:
        return await client.request(
            method,
            path,
            content=body,
            headers=httpx.Headers([("content-type", "application/json"), *(headers or [])]),
        )


def lines(app: GatewayApp, path: Path) -> list[dict[str, Any]]:
    """Every line written so far (the writer thread is not running: written here)."""
    assert app.audit is not None
    app.audit.sink.flush()
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def line_for(app: GatewayApp, path: Path, response: httpx.Response) -> dict[str, Any]:
    """The one line written for `response` (found by its X-Request-Id)."""
    request_id = response.headers["x-request-id"]
    found = [line for line in lines(app, path) if line["request_id"] == request_id]
    assert len(found) == 1, found
    return found[0]
