"""A whole gateway in process (files → snapshot → GatewayApp, the backend in memory) whose
policy is in Broker mode with workloadIdentity: a cluster issuer whose service-account tokens
are signed with `CLUSTER_KEY` (RS256, as kube-apiserver signs) and a SPIFFE-like issuer signing
with an EC key. Assertions are minted here with those keys; the gateway knows only their public
halves (inline JWKS)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import ECKey

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from support import claims_for, jwks_of, mint, new_key
from unit.resources_fixture import BASE, write
from unit.stages.harness import MemoryUpstream, Response, drive

CLUSTER = "https://kubernetes.default.svc.cluster.local"
SPIFFE = "https://spire.example"
RESOURCE = "http://gw.test/mcp"
ISSUED_BY = RESOURCE  # the gateway's issuer for workload tokens: the resource's origin and path
TOKEN = "/mcp/oauth/token"
AUDIENCE = "http://gw.test/mcp/oauth/token"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
IDP = "http://idp/application/o/mcp/"
CLUSTER_KEY = new_key("cluster")
SPIFFE_KEY = ECKey.generate_key("P-256", parameters={"kid": "spire", "alg": "ES256"})
USER_KEY = new_key("idp")
FORM = (b"content-type", b"application/x-www-form-urlencoded")

# Namespace `agents` may get tokens from the cluster issuer; the route lets in its `reader`
# (and users of the mcp-agent group), and its tool rules let `reader` call read_* tools only.
CLUSTER_RULES = ['jwt["kubernetes.io"].namespace == "agents"']
ROUTE_RULES = ['"mcp-agent" in jwt.groups', 'jwt.sub.startsWith("system:serviceaccount:agents:")']


def sa_claims(
    namespace: str = "agents",
    name: str = "reader",
    audience: object = AUDIENCE,
    ttl: int = 600,
    jti: str | None = "jti-1",
    **extra: object,
) -> dict[str, object]:
    """A Kubernetes service-account token's claims (as `kubectl create token` makes them)."""
    now = int(time.time())
    claims: dict[str, object] = {
        "iss": CLUSTER,
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "aud": audience if isinstance(audience, list) else [audience],
        "iat": now,
        "nbf": now,
        "exp": now + ttl,
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": "00000000-0000-0000-0000-000000000001"},
        },
        **extra,
    }
    if jti is not None:
        claims["jti"] = jti
    return claims


def sa_token(claims: dict[str, object], key: Any = CLUSTER_KEY) -> str:
    """Signed as kube-apiserver signs: RS256, a kid, no typ."""
    return jwt.encode({"alg": "RS256", "kid": key.kid}, claims, key, algorithms=["RS256"])


def svid(sub: str = "spiffe://example.org/agent", **extra: object) -> str:
    """A SPIFFE JWT-SVID of the second issuer (ES256)."""
    now = int(time.time())
    claims = {"iss": SPIFFE, "sub": sub, "aud": [AUDIENCE], "iat": now, "exp": now + 300}
    claims.update(extra)
    return jwt.encode(
        {"alg": "ES256", "kid": "spire", "typ": "JWT"}, claims, SPIFFE_KEY, algorithms=["ES256"]
    )


def user_token(**extra: object) -> str:
    """An access token of the route's provider (a signed-in user)."""
    return mint(USER_KEY, claims_for(IDP, "mcp-public", **extra))


def _inline(key: Any) -> str:
    return json.dumps(jwks_of(key))


def policy_yaml(
    cluster_rules: list[str] = CLUSTER_RULES,
    cluster_scopes: str = "[mcp:tools, mcp:read]",
    route_rules: list[str] = ROUTE_RULES,
    action: str = "Allow",
    redis_url: str | None = None,
) -> str:
    """The Broker policy with two workload issuers (its state in Redis when given its URL)."""
    spiffe = json.dumps({"keys": [SPIFFE_KEY.as_dict(private=False)]})
    broker = f"\n        broker: {{redisUrl: {json.dumps(redis_url)}}}" if redis_url else ""
    return f"""
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: auth}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {IDP}
          audiences: [mcp-public]
          jwks: {{inline: {json.dumps(_inline(USER_KEY))}}}
      mcp:
        provider: ProviderB
        clientId: mcp-public
        authorizationServerMode: Broker
        resourceMetadata: {{resource: {RESOURCE}, scopesSupported: [openid]}}{broker}
        workloadIdentity:
          issuers:
            - issuer: {CLUSTER}
              jwks: {{inline: {json.dumps(_inline(CLUSTER_KEY))}}}
              audiences: [{AUDIENCE}]
              authorization:
                action: {action}
                policy: {{matchExpressions: {json.dumps(cluster_rules)}}}
              scopes: {cluster_scopes}
            - issuer: {SPIFFE}
              jwks: {{inline: {json.dumps(spiffe)}}}
              audiences: [{AUDIENCE}]
              authorization:
                policy: {{matchExpressions: ['jwt.sub == "spiffe://example.org/agent"']}}
    authorization:
      action: Allow
      policy: {{matchExpressions: {json.dumps(route_rules)}}}
"""


def gateway(
    tmp_path, text: str | None = None, options: ServeOptions | None = None
) -> tuple[GatewayApp, MemoryUpstream]:
    """The gateway serving BASE's route under the workload policy (or `text`)."""
    upstream = MemoryUpstream()
    loaded = load_paths([write(tmp_path, BASE + (text or policy_yaml()))])
    snapshot = build_snapshot(loaded)
    assert snapshot.ok, (snapshot.errors, [p.conditions for p in snapshot.policies])
    return GatewayApp(ControlPlane(snapshot), options or ServeOptions(), upstream), upstream


def audit_lines(app: GatewayApp, path: Path) -> list[dict[str, Any]]:
    """Every audit line written so far (the writer thread is not running: written here)."""
    assert app.audit is not None
    app.audit.sink.flush()
    return [json.loads(line) for line in path.read_text().splitlines()]


async def exchange(app: GatewayApp, assertion: str | None, **form: str) -> Response:
    """A jwt-bearer token request carrying `assertion` (and the other form fields)."""
    fields = {"grant_type": JWT_BEARER, **form}
    if assertion is not None:
        fields["assertion"] = assertion
    body = urlencode(fields).encode()
    return await drive(app, "POST", TOKEN, body=body, headers=[FORM])


async def call(app: GatewayApp, token: str) -> Response:
    """An MCP request to the route with `token`."""
    return await drive(
        app,
        "POST",
        "/mcp",
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        headers=[
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
        ],
    )
