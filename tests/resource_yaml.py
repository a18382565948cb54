"""Gateway resources as YAML text, for tests that start a gateway on files."""

from __future__ import annotations


def route(name: str, path: str, backend: str, extra: str = "") -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: Exact, value: {path}}}}}]
      backendRefs: [{{name: {name}}}]{extra}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: {name}}}
spec:
  mcp:
    targets: [{{name: t, static: {{host: 127.0.0.1, port: {backend.rsplit(":", 1)[1]},
                                   path: {path}}}}}]
"""
