"""Micro-benchmark: what the audit trail (`serve --audit-log`) costs per request, in process.

Runs the whole gateway (entry checks, routing, JWT authentication with a cached token, CEL
rules, tool-level authorization, the reverse proxy) over an in-memory backend, with and without
an audit log, and prints the difference per request for an allowed `tools/call`, for a denied
one, and for a request without a token. The writer thread's work (encoding is done on the
request path; writing is not) runs beside it, as it does when serving.
Usage: python benchmarks/audit_trail.py [N]"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from mcp_oauth_gateway.asgi import Headers, Message
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions

ISSUER = "http://idp/"
RESOURCES = """
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
  rules: [{matches: [{path: {type: PathPrefix, value: /mcp}}], backendRefs: [{name: backend}]}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {name: backend}
spec:
  mcp:
    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {name: auth}
spec:
  targetRefs: [{kind: HTTPRoute, name: mcp}]
  traffic:
    jwtAuthentication:
      providers: [{issuer: "ISSUER", audiences: [mcp], jwks: {inline: 'JWKS'}}]
    authorization:
      action: Allow
      policy: {matchExpressions: ['"users" in jwt.groups']}
  backend:
    mcp:
      authorization:
        action: Allow
        policy: {matchExpressions: ['mcp.tool.name in ["t1", "t2"]']}
"""


def _key_and_token() -> tuple[str, str]:
    """An inline keyset and a token it verifies (joserfc, as the gateway's own tests mint)."""
    from joserfc import jwt
    from joserfc.jwk import RSAKey

    key = RSAKey.generate_key(2048, parameters={"kid": "k1", "alg": "RS256", "use": "sig"})
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": "mcp", "sub": "alice", "groups": ["users"]}
    token = jwt.encode(
        {"alg": "RS256", "kid": "k1"}, {**claims, "iat": now, "exp": now + 3600}, key
    )
    return json.dumps({"keys": [key.as_dict(private=False)]}), token


class Response:
    status = 200
    headers: Headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]

    def complete_body(self) -> bytes | None:
        return b"{}"

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b"{}"

    def release(self) -> None:
        return None


class MemoryUpstream:
    """A backend that answers `{}` at once."""

    async def request(self, *args: object, **options: object) -> Response:
        return Response()

    async def close(self) -> None:
        return None


def _app(directory: Path, jwks: str, audit: bool) -> GatewayApp:
    text = RESOURCES.replace("ISSUER", ISSUER).replace("JWKS", jwks)
    path = directory / "resources.yaml"
    path.write_text(text)
    snapshot = build_snapshot(load_paths([path]))
    assert snapshot.ok, snapshot.errors
    options = ServeOptions(audit_log=str(directory / "audit.log") if audit else None)
    return GatewayApp(ControlPlane(snapshot), options, upstream=MemoryUpstream())


async def _discard(message: Message) -> None:
    return None


async def per_request_us(app: GatewayApp, body: bytes, token: str | None, n: int) -> float:
    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"host", b"gw.example"), (b"content-type", b"application/json")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    started = time.perf_counter()
    for _ in range(n):
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": list(headers),
            "server": ("127.0.0.1", 8080),
            "query_string": b"",
        }
        await app(scope, receive, _discard)
    return (time.perf_counter() - started) / n * 1e6


def _call(tool: str) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool}}
    ).encode()


async def main(n: int) -> None:
    jwks, token = _key_and_token()
    with tempfile.TemporaryDirectory() as directory:
        plain = _app(Path(directory), jwks, audit=False)
        audited = _app(Path(directory), jwks, audit=True)
        assert audited.audit is not None
        audited.audit.sink.start()
        cases = (
            ("tools/call, allowed", _call("t1"), token),
            ("tools/call, denied by a tool rule", _call("rm"), token),
            ("no token (401)", _call("t1"), None),
        )
        try:
            for label, body, bearer in cases:
                await per_request_us(audited, body, bearer, n // 10)  # warm-up, caches filled
                await per_request_us(plain, body, bearer, n // 10)
                base = await per_request_us(plain, body, bearer, n)
                with_audit = await per_request_us(audited, body, bearer, n)
                print(
                    f"{label}: {base:.1f} µs without, {with_audit:.1f} µs with the audit log "
                    f"(+{with_audit - base:.1f} µs per request)"
                )
        finally:
            audited.audit.stop()
        lines = (Path(directory) / "audit.log").read_text().count("\n")
        print(f"{lines} audit lines written")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000))
