"""DPoP at the resource server, end to end: npm oidc-provider (the Keycloak layout) issuing
DPoP-bound JWT access tokens, two gateway replicas behind a TCP load balancer sharing a real
Redis, a policy whose provider requires DPoP (ES256 or EdDSA proofs, server nonces), and what a
client sends: proofs signed by a key it holds, in every way a client or an attacker would."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from joserfc.jwk import ECKey, Key, RSAKey

from loadbalancer_support import LoadBalancer
from mcp_oauth_gateway.dpop import access_token_hash
from support import (
    NODE_DIR,
    PEERS,
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    mint,
    node,
    wait_for_keyset,
    wait_for_port,
)
from unit.dpop.dpop_support import public_jwk, rfc7638, sign

CLIENT_ID = "mcp-public"
ALGORITHMS = ["ES256", "EdDSA"]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "dpop-e2e", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _routing(gateway_port: int, backend: str) -> str:
    """The Gateway, its route (with CORS for a browser app) and the backend it leads to."""
    host, port = backend.rsplit(":", 1)
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: mcp-oauth-gateway
  listeners: [{{name: http, port: {gateway_port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: default}}
spec:
  parentRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw, namespace: default}}]
  rules:
    - matches:
        - path: {{type: PathPrefix, value: /mcp}}
        - path: {{type: PathPrefix, value: /.well-known/oauth-protected-resource/mcp}}
      filters:
        - type: CORS
          cors:
            allowOrigins: ["https://app.example"]
            allowHeaders: [Authorization, Content-Type, Mcp-Session-Id]
            exposeHeaders: [Mcp-Session-Id]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: mcp}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: mcp, namespace: default}}
spec:
  mcp:
    targets: [{{name: mcp, static: {{host: {host}, port: {port}, path: /mcp}}}}]
"""


def _policy(idp_port: int, realm: str, public: str, more: str) -> str:
    """The provider's Service and the policy requiring DPoP-bound tokens from it."""
    issuer = f"http://127.0.0.1:{idp_port}/realms/{realm}"
    return f"""\
apiVersion: v1
kind: Service
metadata: {{name: idp, namespace: default}}
spec: {{type: ExternalName, externalName: 127.0.0.1, ports: [{{port: {idp_port}}}]}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: dpop, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {issuer}
          jwks:
            remote:
              backendRef: {{name: idp, port: {idp_port}}}
              jwksPath: /realms/{realm}/protocol/openid-connect/certs
          dpop: Required
          {more}
      mcp:
        resourceMetadata:
          resource: {public}
          scopesSupported: [openid, profile]
"""


def config(
    gateway_port: int,
    idp_port: int,
    backend: str,
    public: str,
    realm: str = "master",
    provider: str = "audiences: [{public}]\n          dpopProofs: {proofs}",
) -> str:
    """The gateway's resources: one route to the backend, a policy whose provider (a realm of a
    Keycloak-shaped issuer; `provider`: more of its fields) requires DPoP-bound tokens, and its
    resource metadata naming the provider itself (the client signs in there directly, as MCP
    clients that check the metadata's issuer do)."""
    proofs = json.dumps({"algorithms": ALGORITHMS, "requireNonce": True})
    more = provider.format(public=public, proofs=proofs)
    return _routing(gateway_port, backend) + "---\n" + _policy(idp_port, realm, public, more)


@dataclass
class Stack:
    """The provider, the MCP server, the two replicas (their own ports, their own audit logs)
    and the load balancer in front."""

    issuer: str
    public: str  # the MCP URL clients use: the load balancer's
    replicas: list[int]
    balancer: LoadBalancer
    audits: list[Path]
    backend: str

    def audit_lines(self) -> list[dict[str, Any]]:
        """Every audit line both replicas wrote so far."""
        found = []
        for path in self.audits:
            if path.exists():
                found += [json.loads(line) for line in path.read_text().splitlines()]
        return found

    def at(self, replica: int) -> str:
        """One replica's MCP URL, reached directly (sent with the balancer's Host)."""
        return f"http://127.0.0.1:{self.replicas[replica]}/mcp"

    @property
    def host(self) -> str:
        """The Host clients send (the load balancer's)."""
        return self.public.split("/")[2]


@contextmanager
def dpop_stack(
    logs: Path,
    directory: Path,
    idp_key: tuple[RSAKey, Path],
    redis: str,
    make_config: Callable[[int, int, str, str], str] = config,
    idp_env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """Start the provider (`idp_env`: more of its settings), an MCP server of its own (what it
    received is this module's alone), the load balancer and two replicas (configured by
    `make_config(gateway port, provider port, backend, public MCP URL)`); stop them all
    afterwards."""
    with ExitStack() as stack:
        backend_port = free_port()
        server = Process(
            "mcp-backend-dpop",
            [sys.executable, str(PEERS / "mcp_backend.py"), str(backend_port)],
            logs,
        )
        stack.callback(server.stop)
        wait_for_port(backend_port, server)
        backend = f"127.0.0.1:{backend_port}"
        balancer = stack.enter_context(LoadBalancer())
        public = balancer.url("/mcp")
        idp_port = free_port()
        env = {
            "IDP_PORT": str(idp_port),
            "FLAVOUR": "keycloak",
            "KEY_FILE": str(idp_key[1]),
            "CLIENT_ID": CLIENT_ID,
            "RESOURCE": public,
            **(idp_env or {}),
        }
        idp = Process("idp-dpop", [node(), str(NODE_DIR / "idp.mjs")], logs, env=env)
        stack.callback(idp.stop)
        wait_for_port(idp_port, idp)
        replicas = []
        audits = [directory / f"audit-{index}.jsonl" for index in range(2)]
        for index in range(2):
            port = free_port()
            folder = directory / f"replica-{index}"
            folder.mkdir()
            (folder / "gateway.yaml").write_text(make_config(port, idp_port, backend, public))
            replica = Process(
                f"gateway-dpop-{index}",
                [*gateway_cmd(folder), "--audit-log", str(audits[index])],
                logs,
                env={"MCP_OAUTH_GATEWAY_REDIS_URL": redis},
            )
            stack.callback(replica.stop)
            wait_for_port(port, replica)
            balancer.add(port)
            replicas.append(port)
        issuer = f"http://127.0.0.1:{idp_port}/realms/master"
        plausible = mint(idp_key[0], claims_for(issuer, public))
        for port in replicas:
            wait_for_keyset(f"http://127.0.0.1:{port}", plausible)
        yield Stack(issuer, public, replicas, balancer, audits, backend)


def run_dpop_client(mcp_url: str, user: str = "alice", *more: str) -> dict[str, Any]:
    """Run tests/node/ts_dpop_client.mjs and return its JSON report (`more`: its client id,
    algorithm and `--refresh`, in place of the pre-registered client's)."""
    done = subprocess.run(
        [node(), str(NODE_DIR / "ts_dpop_client.mjs"), mcp_url, user, *(more or (CLIENT_ID,))],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=NODE_DIR,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def holder_key(jwk: dict[str, Any]) -> Key:
    """The client's private key, as the client exported it."""
    return ECKey.import_key(jwk)


def proof_for(
    key: Key,
    token: str | None,
    htu: str,
    method: str = "POST",
    nonce: str | None = None,
    head: dict[str, Any] | None = None,
    alg: str = "ES256",
    **changes: Any,
) -> str:
    """A proof signed by `key` for `method` to `htu` now, with `token`'s hash (none at a
    token endpoint) and `nonce`; `changes` replace claims (`name=None` removes one), `head`
    the whole header."""
    claims: dict[str, Any] = {
        "jti": str(uuid.uuid4()),
        "htm": method,
        "htu": htu,
        "iat": int(time.time()),
        "ath": access_token_hash(token) if token is not None else None,
        "nonce": nonce,
    }
    claims.update(changes)
    claims = {name: value for name, value in claims.items() if value is not None}
    header = head or {"typ": "dpop+jwt", "alg": alg, "jwk": public_jwk(key)}
    return sign(header, claims, key, alg)


def thumbprint(key: Key) -> str:
    """RFC 7638 thumbprint of a key's public part."""
    return rfc7638(public_jwk(key))


def call(
    url: str, token: str, proof: str | None, host: str, method: str = "POST", scheme: str = "DPoP"
) -> httpx.Response:
    """One MCP request (an initialize) with `token` and `proof`, sent with Host `host`."""
    headers = {**ACCEPT, "authorization": f"{scheme} {token}", "host": host}
    if proof is not None:
        headers["dpop"] = proof
    body = json.dumps(INITIALIZE) if method == "POST" else None
    return httpx.request(method, url, headers=headers, content=body, timeout=10)
