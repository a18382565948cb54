"""A gateway that serves a file for weeks does not grow with every edit (issue 39): `serve` on a
file of some hundreds of routes, one policy rewritten again and again, each change waited for
until the gateway answers with it; the resident set after the last change is within a fixed
budget of what it was after the 20th.

Before the fix every route's OAuth endpoints stage was a reference cycle, so each reload left
the whole previous configuration's pipelines in memory (`serve`'s collector settings run a full
collection almost never): at 150 routes ~0.6 MB a change, 24 MB over the 40 measured here. The
budget is a bound on memory, not on time (benchmarks/reload_memory.py measures 1,000 changes)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from support import Process, free_port, gateway_cmd, wait_for_port, wait_until

ROUTES = 150
CHANGES = 60
MEASURED_FROM = 20
# What 40 more changes may add: a few MB of allocator and interpreter noise, far below the
# 24 MB that leaking each replaced configuration's pipelines added.
BUDGET_MB = 8.0
# RFC 7515 A.3's P-256 public key: the policies need a key; no token is ever sent.
JWKS = (
    '{"keys":[{"kty":"EC","crv":"P-256","kid":"k",'
    '"x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",'
    '"y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
)


def resources(port: int, scopes: dict[int, str]) -> str:
    """The Gateway and ROUTES routes, each with a backend and a policy whose MCP metadata
    advertises `scopes[i]`."""
    text = f"""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
"""
    for i in range(ROUTES):
        text += f"""---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches:
        - path: {{type: PathPrefix, value: /r{i}}}
        - path: {{type: PathPrefix, value: /.well-known/oauth-protected-resource/r{i}}}
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
  targetRefs: [{{kind: HTTPRoute, name: r{i}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: https://idp.example/
          audiences: [mcp]
          jwks: {{inline: '{JWKS}'}}
      mcp:
        resourceMetadata:
          resource: http://127.0.0.1:{port}/r{i}
          scopesSupported: [{scopes[i]}]
    authorization:
      action: Allow
      policy: {{matchExpressions: ['"team-{i}" in jwt.groups']}}
"""
    return text


def rss_mb(pid: int) -> float:
    """The process's resident set, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"process {pid} has no VmRSS")


def scopes_served(base: str, route: int) -> list[str] | None:
    try:
        answer = httpx.get(f"{base}/.well-known/oauth-protected-resource/r{route}", timeout=10)
    except httpx.HTTPError:
        return None
    return answer.json().get("scopes_supported") if answer.status_code == 200 else None


def test_rss_stays_within_a_budget_across_many_reloads(tmp_path, logs):
    port, admin = free_port(), free_port()
    config = tmp_path / "resources.yaml"
    scopes = dict.fromkeys(range(ROUTES), "s-0")
    config.write_text(resources(port, scopes))
    # Metrics and the audit trail on: their per-route state is rebuilt by every reload too.
    gateway = Process(
        "gateway-reload-memory",
        [
            *gateway_cmd(config),
            "--watch-interval",
            "0.05",
            "--status-port",
            str(admin),
            "--audit-log",
            str(tmp_path / "audit.log"),
        ],
        logs,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port, gateway)
        rss: dict[int, float] = {}
        for n in range(1, CHANGES + 1):
            route = (n * 7) % ROUTES
            scopes[route] = f"s-{n}"
            staged = tmp_path / ".resources.yaml.new"
            staged.write_text(resources(port, scopes))
            os.replace(staged, config)
            wait_until(
                lambda route=route, n=n: scopes_served(base, route) == [f"s-{n}"],
                60,
                f"change {n} to be served",
            )
            rss[n] = rss_mb(gateway.popen.pid)
    finally:
        gateway.stop()
    grown = rss[CHANGES] - rss[MEASURED_FROM]
    assert grown < BUDGET_MB, (
        f"RSS grew {grown:.1f} MB from change {MEASURED_FROM} to {CHANGES} "
        f"(budget {BUDGET_MB} MB): {rss[MEASURED_FROM]:.1f} → {rss[CHANGES]:.1f} MB; "
        f"after each change: {[round(rss[n], 1) for n in sorted(rss)]}"
    )
