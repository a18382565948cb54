"""The servers' configuration files, as text: the gateway's resources (one route, one backend,
JWT authentication and one CEL rule, plus whatever an optional stage adds), HAProxy checking the
same token with `jwt_verify`, and nginx as a plain proxy."""

from __future__ import annotations

from pathlib import Path

ISSUER = "https://idp.bench.example/application/o/mcp/"
AUDIENCE = "mcp-bench"
# The optional stages whose cost per request the report gives (each alone, then all at once).
STAGES = ("rate limit", "transformation", "tool authorization", "metrics", "JSON logs", "tracing")


def gateway_yaml(port: int, backend_port: int, jwks: str, traffic: str, backend: str) -> str:
    """The gateway's resources; `traffic` and `backend` are a stage's additions (YAML lines)."""
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{matches: [{{path: {{type: PathPrefix, value: /mcp}}}}], backendRefs: [{{name: b}}]}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: b}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: {backend_port}}}}}]}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: auth}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [{AUDIENCE}]
          jwks: {{inline: '{jwks}'}}
    authorization:
      action: Allow
      policy: {{matchExpressions: ['"mcp-agent" in jwt.groups']}}
{traffic}{backend}"""


def stage_yaml(names: set[str]) -> tuple[str, str]:
    """What the named stages add to the policy: YAML under `traffic`, and under `spec` (the
    backend section)."""
    traffic = backend = ""
    if "rate limit" in names:
        traffic += "    rateLimit: {key: 'jwt.sub', requests: 1000000000, window: 1m}\n"
    if "transformation" in names:
        traffic += (
            "    transformation:\n      request:\n        set:\n"
            "          - {name: X-User, value: 'jwt.sub'}\n"
            "          - {name: X-Groups, value: 'jwt.groups.join(\",\")'}\n"
            "        remove: [X-Internal-Secret]\n"
        )
    if "tool authorization" in names:
        backend = (
            "  backend:\n    mcp:\n      authorization:\n        action: Allow\n"
            '        policy: {matchExpressions: [\'mcp.tool.name in ["add", "search"]\']}\n'
        )
    return traffic, backend


def haproxy_cfg(port: int, backend_port: int, pem: Path) -> str:
    """HAProxy checking the token as the gateway does: RS256 signature, iss, aud, exp, group."""
    return f"""
global
    maxconn 4000
    nbthread 1
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    option http-no-delay
frontend fe
    bind 127.0.0.1:{port}
    http-request set-var(txn.bearer) http_auth_bearer
    http-request set-var(txn.alg) var(txn.bearer),jwt_header_query('$.alg')
    http-request deny deny_status 401 unless {{ var(txn.alg) -m str RS256 }}
    http-request set-var(txn.valid) var(txn.bearer),jwt_verify(txn.alg,"{pem}")
    http-request deny deny_status 401 unless {{ var(txn.valid) -m int 1 }}
    http-request set-var(txn.iss) var(txn.bearer),jwt_payload_query('$.iss')
    http-request deny deny_status 401 unless {{ var(txn.iss) -m str {ISSUER} }}
    http-request set-var(txn.aud) var(txn.bearer),jwt_payload_query('$.aud')
    http-request deny deny_status 401 unless {{ var(txn.aud) -m str {AUDIENCE} }}
    http-request set-var(txn.exp) var(txn.bearer),jwt_payload_query('$.exp','int')
    http-request set-var(txn.now) date()
    http-request deny deny_status 401 if {{ var(txn.exp),sub(txn.now) -m int le 0 }}
    http-request set-var(txn.group) var(txn.bearer),jwt_payload_query('$.groups[0]')
    http-request deny deny_status 403 unless {{ var(txn.group) -m str mcp-agent }}
    http-request del-header Authorization
    default_backend be
backend be
    http-reuse always
    server s1 127.0.0.1:{backend_port}
"""


def nginx_conf(prefix: Path, port: int, backend_port: int) -> str:
    """nginx as a plain proxy with keep-alive to the backend, its files under `prefix`."""
    return f"""
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix};
    proxy_temp_path {prefix};
    upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def route_yaml(i: int, backend_port: int, jwks: str, rule: str) -> str:
    """Route `i` of a many-routes run: an HTTPRoute `/r{i}`, its GatewayBackend and a
    GatewayPolicy (JWT against `jwks`, a flow-style YAML mapping, and the CEL `rule`)."""
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /r{i}}}}}]
      backendRefs: [{{name: b{i}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: b{i}}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: {backend_port}}}}}]}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: p{i}}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: r{i}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [{AUDIENCE}]
          jwks: {jwks}
    authorization:
      action: Allow
      policy: {{matchExpressions: ['{rule}']}}
"""
