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
        backend = tool_rule_yaml('mcp.tool.name in ["add", "search"]')
    return traffic, backend


def tool_rule_yaml(expression: str) -> str:
    """The policy's tool-level authorization (under `spec`): the one CEL `expression`."""
    return (
        "  backend:\n    mcp:\n      authorization:\n        action: Allow\n"
        f"        policy: {{matchExpressions: ['{expression}']}}\n"
    )


def haproxy_cfg(port: int, backend_port: int, pem: Path, tool: str | None = None) -> str:
    """HAProxy checking the token as the gateway does: RS256 signature, iss, aud, exp, group;
    with `tool`, also a tool rule on the JSON-RPC body (`haproxy_tool_rule`)."""
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
    http-request deny deny_status 401 unless {{ var(txn.exp) -m found }}
    http-request deny deny_status 401 if {{ var(txn.exp),sub(txn.now) -m int le 0 }}
    http-request set-var(txn.group) var(txn.bearer),jwt_payload_query('$.groups[0]')
    http-request deny deny_status 403 unless {{ var(txn.group) -m str mcp-agent }}
{haproxy_tool_rule(tool) if tool else ""}    http-request del-header Authorization
    default_backend be
backend be
    http-reuse always
    server s1 127.0.0.1:{backend_port}
"""


def haproxy_tool_rule(tool: str) -> str:
    """HAProxy lines letting a POST through only as one JSON-RPC object with a method, and a
    `tools/call` only of `tool` (the body read by HAProxy's own JSON query, whole)."""
    return f"""    option http-buffer-request
    http-request set-var(txn.rpc) req.body,json_query('$.method') if METH_POST
    http-request deny deny_status 400 if METH_POST !{{ var(txn.rpc) -m found }}
    http-request set-var(txn.tool) req.body,json_query('$.params.name') if METH_POST
    acl tools_call var(txn.rpc) -m str tools/call
    acl allowed_tool var(txn.tool) -m str {tool}
    http-request deny deny_status 403 if tools_call !allowed_tool
"""


def mcp_proxy_toml(port: int, backend_port: int, tool: str, groups: str, admin_token: str) -> str:
    """mcp-proxy 0.6 terminating MCP in front of the backend's /mcp: JWT checked against the
    backend's JWKS (RS256, iss, aud, exp), and one role allowed `tool` alone (namespaced
    `bench/`), given to a caller whose `groups` claim is, as text, exactly `groups`: its role
    mapping reads a claim as one string (or space-separated words), so a list claim matches
    only as its whole JSON text; a caller mapped to no role is refused (default_deny). Its
    audience is its own URL (`mcp_proxy_audience`): it requires that one in every token."""
    backend = f"http://127.0.0.1:{backend_port}"
    return f"""
[proxy]
name = "peers-bench"
[proxy.listen]
host = "127.0.0.1"
port = {port}

[[backends]]
name = "bench"
transport = "http"
url = "{backend}/mcp"

[auth]
type = "jwt"
issuer = "{ISSUER}"
audience = "{mcp_proxy_audience(port)}"
jwks_uri = "{backend}/.well-known/jwks.json"

[[auth.roles]]
name = "agent"
allow_tools = ["bench/{tool}"]

[auth.role_mapping]
claim = "groups"
default_deny = true
mapping = {{ '{groups}' = "agent" }}

[security]
admin_token = "{admin_token}"

# Its documented default, said: without this table the level is empty and tower-mcp logs every
# backend request at DEBUG (mcp-proxy 0.6's ObservabilityConfig::default).
[observability]
log_level = "info"
"""


def mcp_proxy_audience(port: int) -> str:
    """The audience mcp-proxy requires in a token besides its configured one: the MCP resource,
    built from its listen address (tower-mcp's OAuth layer, RFC 8707), so it is configured as
    the one audience, and its tokens carry it."""
    return f"http://127.0.0.1:{port}"


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
