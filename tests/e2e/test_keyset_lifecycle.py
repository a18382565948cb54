"""The keyset's life: fail closed before the first fetch, one refetch on an unknown kid (rate
limited), keys removed from the JWKS refused after the next refresh, last good keyset kept."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from joserfc.jwk import RSAKey

from support import (
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    jwks_of,
    mint,
    new_key,
    wait_for_port,
    wait_until,
)

ISSUER = "https://idp.example.test/application/o/mcp/"
AUDIENCE = "mcp-public"


@dataclass
class JwksServer:
    """A JWKS endpoint whose keys, availability and fetch count the test controls."""

    keys: list[RSAKey]
    up: bool = True
    fetches: int = 0
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self) -> ThreadingHTTPServer:
        state = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with state.lock:
                    state.fetches += 1
                    up, body = state.up, json.dumps(jwks_of(*state.keys)).encode()
                if not up:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def write_config(
    directory: Path, gateway_port: int, jwks_port: int, backend: str, cache: str
) -> Path:
    host, port = backend.rsplit(":", 1)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "all.yaml").write_text(f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  listeners: [{{name: http, port: {gateway_port}, protocol: HTTP}}]
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
    targets: [{{name: t, static: {{host: {host}, port: {port}}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: keys}}
spec: {{type: ExternalName, externalName: 127.0.0.1}}
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
          jwks:
            remote:
              backendRef: {{name: keys, port: {jwks_port}}}
              jwksPath: /application/o/mcp/jwks/
              cacheDuration: {cache}
""")
    return directory


@pytest.fixture
def rig(
    request: pytest.FixtureRequest, tmp_path: Path, logs: Path, backend: str
) -> Iterator[tuple[JwksServer, str, Process, str]]:
    """A JWKS server (initially down) and a gateway refreshing from it (every 2 s unless the
    test is marked otherwise), with its status listener."""
    marker = request.node.get_closest_marker("cache_duration")
    cache = marker.args[0] if marker else "2s"
    jwks = JwksServer(keys=[new_key("k-1")], up=False, port=free_port())
    server = jwks.serve()
    gw_port = free_port()
    config = write_config(tmp_path / "config", gw_port, jwks.port, backend, cache)
    status_port = free_port()
    gateway = Process(
        f"gateway-lifecycle-{tmp_path.name}",
        [*gateway_cmd(config), "--status-port", str(status_port)],
        logs,
    )
    try:
        wait_for_port(gw_port, gateway)
        yield jwks, f"http://127.0.0.1:{gw_port}", gateway, f"http://127.0.0.1:{status_port}"
    finally:
        gateway.stop()
        server.shutdown()


def call(base: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{base}/mcp",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        timeout=10,
    )


def test_fail_closed_until_first_fetch_then_recovers(rig):
    jwks, base, gateway, _ = rig
    token = mint(jwks.keys[0], claims_for(ISSUER, AUDIENCE))
    response = call(base, token)
    # The wait is the gateway's: 503 with Retry-After, not a 401 that sends the client to sign
    # in again with a token that is fine. A token wrong anyway is still 401.
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert "not yet available" in response.json()["error_description"]
    expired = mint(jwks.keys[0], claims_for(ISSUER, AUDIENCE, ttl=-600))
    assert call(base, expired).status_code == 401
    wait_until(lambda: "not yet available" in gateway.log(), 30, "the fetch failure to be logged")
    jwks.up = True
    wait_until(lambda: call(base, token).status_code == 200, 30, "recovery after JWKS is up")


@pytest.mark.cache_duration("5m")  # no periodic refresh interferes with the fetch count
def test_unknown_kid_refetches_once_and_rotation_works(rig):
    jwks, base, _, _ = rig
    jwks.up = True
    old = jwks.keys[0]
    wait_until(
        lambda: call(base, mint(old, claims_for(ISSUER, AUDIENCE))).status_code == 200,
        30,
        "first fetch",
    )
    # The flood below is made before the clock starts: the refetch for the rotated key opens a
    # 10 s interval, and twenty RSA keys generated inside it took seconds on a loaded machine
    # (one more refetch, rightly, once the interval had passed).
    forger = new_key("forger")
    flood = [
        mint(forger, claims_for(ISSUER, AUDIENCE), header={"kid": f"forged-{i}"}) for i in range(20)
    ]
    # A new signing key appears: the first token naming it triggers one refetch and passes.
    rotated = new_key("k-2")
    rotated_token = mint(rotated, claims_for(ISSUER, AUDIENCE))
    jwks.keys = [old, rotated]
    before = jwks.fetches
    assert call(base, rotated_token).status_code == 200
    assert jwks.fetches - before == 1
    # A flood of unknown kids costs at most one more fetch within the rate-limit interval.
    before = jwks.fetches
    for forged in flood:
        response = call(base, forged)
        assert response.status_code == 401
        assert "no key with kid" in response.json()["error_description"]
    assert jwks.fetches - before == 0, "refetches are rate limited (one per interval)"


def test_removed_key_refused_after_refresh_and_last_good_kept(rig):
    jwks, base, gateway, _ = rig
    first, second = jwks.keys[0], new_key("k-2")
    jwks.keys = [first, second]
    jwks.up = True
    token_first = mint(first, claims_for(ISSUER, AUDIENCE))
    token_second = mint(second, claims_for(ISSUER, AUDIENCE))
    wait_until(lambda: call(base, token_first).status_code == 200, 30, "first fetch")
    jwks.keys = [second]
    wait_until(lambda: call(base, token_first).status_code == 401, 30, "removed key refused")
    assert "no key with kid 'k-1'" in call(base, token_first).json()["error_description"]
    # The endpoint goes down: the last good keyset keeps working and the log says why.
    jwks.up = False
    wait_until(lambda: "keeping the last good keyset" in gateway.log(), 30, "refresh failure log")
    assert call(base, token_second).status_code == 200


def keyset_condition(status: str) -> dict[str, str]:
    conditions = httpx.get(f"{status}/status", timeout=5).json()["policies"][0]["conditions"]
    return next(c for c in conditions if c["type"] == "ResolvedRefs")


def test_status_says_the_keyset_is_stale_while_refreshes_fail(rig):
    jwks, base, _, status = rig
    jwks.up = True
    token = mint(jwks.keys[0], claims_for(ISSUER, AUDIENCE))
    wait_until(lambda: call(base, token).status_code == 200, 30, "first fetch")
    assert keyset_condition(status)["reason"] == "ResolvedRefs"
    jwks.up = False
    wait_until(
        lambda: keyset_condition(status)["reason"] == "KeysetStale",
        30,
        "the status to report a stale keyset",
    )
    condition = keyset_condition(status)
    assert condition["status"] == "True"  # the last good keys still verify tokens
    message = condition["message"]
    assert "refreshing it fails since 20" in message
    assert "HTTP 503" in message
    assert "still verifying tokens with the keys fetched at 20" in message
    assert "next try at 20" in message
    assert call(base, token).status_code == 200
    jwks.up = True
    wait_until(
        lambda: keyset_condition(status)["reason"] == "ResolvedRefs", 30, "the status to recover"
    )


def test_discovery_is_served_stale_while_the_provider_is_down(logs, tmp_path, backend, idp_key):
    """The AS metadata keeps being served from cache (TTL = cacheDuration, 1 s here) when the
    provider is down; a refresh failure is logged, not passed on to clients."""
    from conftest import write_example
    from support import NODE_DIR, node

    idp_port, gw_port = free_port(), free_port()
    idp = Process(
        "idp-discovery",
        [node(), str(NODE_DIR / "idp.mjs")],
        logs,
        env={"IDP_PORT": str(idp_port), "KEY_FILE": str(idp_key[1]), "SLUG": "mcp"},
    )
    config = write_example(
        "provider-b",
        tmp_path / "cfg",
        {"8080": str(gw_port), "9000": str(idp_port), "8000": backend.rsplit(":", 1)[1]},
    )
    policy = config / "policy.yaml"
    policy.write_text(
        policy.read_text().replace(
            "              jwksPath: /application/o/mcp/jwks/",
            "              jwksPath: /application/o/mcp/jwks/\n              cacheDuration: 1s",
        )
    )
    gateway = Process("gateway-discovery", gateway_cmd(config), logs)
    url = f"http://127.0.0.1:{gw_port}/.well-known/oauth-authorization-server/mcp"
    try:
        wait_for_port(idp_port, idp)
        wait_for_port(gw_port, gateway)
        wait_until(lambda: httpx.get(url).status_code == 200, 30, "metadata")
        first = httpx.get(url).json()
        idp.stop()
        # each request after the TTL starts a background refresh, which fails
        wait_until(
            lambda: (
                httpx.get(url).status_code == 200 and "serving the cached copy" in gateway.log()
            ),
            30,
            "a failed refresh after the TTL",
        )
        stale = httpx.get(url)
        assert stale.status_code == 200
        assert stale.json() == first
    finally:
        gateway.stop()
        idp.stop()
