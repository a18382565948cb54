"""Resource YAML for unit tests: the provider-B layout with knobs."""

from __future__ import annotations

BASE = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mcp}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches:
        - path: {type: PathPrefix, value: /mcp}
        - path: {type: PathPrefix, value: /.well-known/oauth-protected-resource/mcp}
        - path: {type: PathPrefix, value: /.well-known/oauth-authorization-server/mcp}
      filters:
        - type: CORS
          cors: {allowCredentials: true, allowOrigins: ["*"], allowMethods: ["*"],
                 allowHeaders: [Origin, Authorization, Content-Type],
                 exposeHeaders: [Origin, Mcp-Session-Id], maxAge: 86400}
      backendRefs: [{name: backend}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {name: backend}
spec:
  mcp:
    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]
---
apiVersion: v1
kind: Service
metadata: {name: authentik}
spec: {type: ExternalName, externalName: idp.internal}
"""


def policy(
    name: str = "auth",
    target: str = "mcp",
    provider: str = "ProviderB",
    client_id: str | None = "mcp-public",
    rules: tuple[str, ...] = ('"mcp-agent" in jwt.groups',),
    issuer: str = "http://idp/application/o/mcp/",
    audiences: str = "[mcp-public]",
) -> str:
    client = f"\n        clientId: {client_id}" if client_id else ""
    expressions = "".join(f"\n          - {r!r}" for r in rules)
    return f"""
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: {name}}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: {target}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {issuer}
          audiences: {audiences}
          jwks:
            remote:
              backendRef: {{name: authentik, port: 9000}}
              jwksPath: /application/o/mcp/jwks/
      mcp:
        provider: {provider}{client}
        resourceMetadata:
          resource: http://gw.example/mcp
          scopesSupported: [openid, profile]
    authorization:
      action: Allow
      policy:
        matchExpressions:{expressions}
"""


def write(tmp_path, text: str):
    path = tmp_path / "resources.yaml"
    path.write_text(text)
    return path
