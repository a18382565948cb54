"""Token exchange behind the gateway: the resources that set it up, and a client's tool calls."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


@dataclass(frozen=True)
class ExchangeConfig:
    """What differs between the providers' exchange set-ups in the generated resources."""

    issuer: str
    kind: str
    audiences: str  # the users' tokens' audience the gateway accepts
    jwks: str
    client: str
    audience: str  # the backend's
    scope: str | None = None


def resources(port: int, backend_port: int, c: ExchangeConfig) -> str:
    """A gateway in front of the backend, exchanging users' tokens for it."""
    scope = f"\n        scope: {c.scope}" if c.scope else ""
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
      backendRefs: [{{name: backend}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend}}
spec:
  mcp:
    targets: [{{name: t, static: {{host: 127.0.0.1, port: {backend_port}, path: /mcp}}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: exchange}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {c.issuer}
          kind: {c.kind}
          audiences: [{c.audiences}]
          jwks: {{remote: {{url: {c.jwks}}}}}
  backend:
    credentials:
      tokenExchange:
        clientId: {c.client}
        clientSecret: {{env: EXCHANGE_SECRET}}
        audience: {c.audience}{scope}
"""


async def call_whoami(base: str, token: str) -> dict:
    """Three tool calls in one MCP session, as a signed-in client makes them."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        results = [await client.call_tool("whoami", {}) for _ in range(3)]
    return json.loads(results[-1].content[0].text)
