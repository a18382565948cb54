"""Two tenants' Broker routes on one host: `/a/mcp` governed by GatewayPolicy `tenant-a` and
`/b/mcp` by `tenant-b`, both in Broker mode at the same identity provider (the npm oidc-provider,
one client for both), sharing the default Redis, served by two replicas of one configuration (the
public host is replica 1's; requests sent to replica 2 name it, as a load balancer passes them).

Each route is an authorization server of its own: a client registered at A is `invalid_client`
at B, naming B's registration endpoint; a sign-in started at A cannot be finished at B; and for
a client valid at both (a metadata document URL) a code, a refresh token or a revocation of A
means nothing at B, and consent given at A is asked again at B, whichever replica answers. Real
clients (the Python and TypeScript SDKs) sign in at both, each as a client of that route's own;
a client id of an earlier version is told to register again."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from broker_calls import metadata_documents
from broker_flow import REDIRECT, BrokerClient
from mcp_oauth_gateway.broker import clients
from mcp_oauth_gateway.broker.store import PREFIX
from node_clients import run_ts_client
from support import NODE_DIR, PEERS, Process, free_port, gateway_cmd, node, wait_for_port

WEB = "https://client.example/cb"  # a redirect URI only the client receives
TENANTS = ("a", "b")

GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: shared, namespace: default}}
spec:
  gatewayClassName: mcp-oauth-gateway
  listeners: [{{name: http, port: {listen}, protocol: HTTP}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend, namespace: default}}
spec:
  mcp:
    targets:
      - {{name: mcp, static: {{host: 127.0.0.1, port: {backend}, path: /mcp}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: idp, namespace: default}}
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports: [{{port: {idp}}}]
"""
TENANT = """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: tenant-{t}, namespace: default}}
spec:
  parentRefs: [{{name: shared, namespace: default}}]
  rules:
    - matches:
        - path: {{type: PathPrefix, value: /{t}/mcp}}
        - path: {{type: PathPrefix, value: /.well-known/oauth-protected-resource/{t}/mcp}}
        - path: {{type: PathPrefix, value: /.well-known/oauth-authorization-server/{t}/mcp}}
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: tenant-{t}, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: tenant-{t}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: http://127.0.0.1:{idp}/application/o/mcp/
          audiences: [mcp-public]
          jwks:
            remote:
              backendRef: {{kind: Service, name: idp, namespace: default, port: {idp}}}
              jwksPath: /application/o/mcp/jwks/
      mcp:
        authorizationServerMode: Broker
        provider: ProviderB
        clientId: mcp-public
        resourceMetadata:
          resource: http://127.0.0.1:{public}/{t}/mcp
          scopesSupported: [openid, profile]
"""


@dataclass
class Tenants:
    """The public origin (replica 1), replica 2's own base URL, and documents to serve."""

    public: str
    replica: str
    documents_base: str
    documents: dict[str, dict]

    def mcp(self, tenant: str) -> str:
        """A tenant's MCP URL (its issuer and resource)."""
        return f"{self.public}/{tenant}/mcp"

    def document_client(self, name: str, *redirects: str) -> str:
        """A client metadata document URL (the same client at every route)."""
        client_id = f"{self.documents_base}/{name}.json"
        self.documents[f"/{name}.json"] = {
            "client_id": client_id,
            "client_name": f"Document client {name}",
            "redirect_uris": list(redirects),
        }
        return client_id


def configuration(directory: Path, listen: int, public: int, idp: int, backend: int) -> Path:
    """One replica's configuration: the same for both but the port it listens on."""
    directory.mkdir(parents=True)
    ports = {"listen": listen, "public": public, "idp": idp, "backend": backend}
    text = GATEWAY.format(**ports) + "".join(TENANT.format(t=t, **ports) for t in TENANTS)
    (directory / "gateway.yaml").write_text(text)
    return directory


@pytest.fixture(scope="module")
def tenants(logs, tmp_path_factory, idp_key, backend, redis_url) -> Iterator[Tenants]:
    tmp = tmp_path_factory.mktemp("tenants")
    idp_port, ports = free_port(), (free_port(), free_port())
    idp_env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(idp_key[1]),
        "CLIENT_ID": "mcp-public",
        "SLUG": "mcp",
        "CALLBACK_PATHS": ",".join(f"/{t}/mcp/oauth/callback" for t in TENANTS),
    }
    started = [Process("idp-tenants", [node(), str(NODE_DIR / "idp.mjs")], logs, env=idp_env)]
    backend_port = int(backend.rsplit(":", 1)[1])
    try:
        wait_for_port(idp_port, started[0])
        for n, port in enumerate(ports, 1):
            config = configuration(tmp / f"r{n}", port, ports[0], idp_port, backend_port)
            started.append(
                Process(
                    f"gateway-tenants-{n}",
                    [*gateway_cmd(config), "--allow-local-client-metadata"],
                    logs,
                    env={"MCP_OAUTH_GATEWAY_REDIS_URL": redis_url},
                )
            )
            wait_for_port(port, started[-1])
        with metadata_documents() as (base, documents):
            yield Tenants(
                f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}", base, documents
            )
    finally:
        for process in reversed(started):
            process.stop()


def registration_endpoint(tenants: Tenants, tenant: str) -> str:
    return (
        f"{tenants.public}/.well-known/oauth-authorization-server/{tenant}/mcp/client-registration"
    )


def test_a_client_registered_at_one_tenant_is_invalid_client_at_the_other(tenants):
    at_a = BrokerClient(tenants.mcp("a")).register()  # through replica 1
    at_b = replace(at_a, mcp=tenants.mcp("b"), via=tenants.replica)
    expected = {
        "error": "invalid_client",
        "error_description": f"client_id {at_a.client_id[:80]!r} was registered with another "
        f"MCP server of this gateway, not {tenants.mcp('b')}; register again through this "
        f"server's registration_endpoint {registration_endpoint(tenants, 'b')}",
    }
    page = httpx.get(at_b.authorize_url())
    assert (page.status_code, page.json()) == (400, expected)
    assert "location" not in page.headers
    for answer in (at_b.redeem("a-code"), at_b.refresh("a-token"), at_b.revoke("a-token", "")):
        assert (answer.status_code, answer.json()) == (400, expected)
    # At its own route the client is good, on either replica.
    assert httpx.get(at_a.authorize_url()).status_code == 200
    own = replace(at_a, via=tenants.replica)._send("GET", at_a.authorize_url())
    assert own.status_code == 200


async def test_a_sign_in_started_at_one_tenant_cannot_be_finished_at_the_other(tenants):
    at_a = BrokerClient(tenants.mcp("a")).register()
    provider_answer = await at_a.provider_redirect("alice", "x")
    at_b = replace(at_a, mcp=tenants.mcp("b"), via=tenants.replica)
    refused = at_b.deliver(provider_answer)
    assert refused.status_code == 400
    assert refused.json()["error_description"] == (
        "unknown, expired or already used state; start the sign-in again"
    )
    finished = replace(at_a, via=tenants.replica).deliver(provider_answer)  # not used up
    assert finished.status_code == 302, finished.text
    assert "code=" in finished.headers["location"]


async def test_a_code_or_token_of_one_tenant_means_nothing_at_the_other(tenants):
    client_id = tenants.document_client("shared", "http://127.0.0.1:47111/cb")
    at_a = BrokerClient(tenants.mcp("a"), client_id=client_id)
    at_b = replace(at_a, mcp=tenants.mcp("b"), via=tenants.replica)
    query = await at_a.code("alice", "x", "openid profile offline_access")
    refused = at_b.redeem(query["code"])
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_grant")
    redeemed = replace(at_a, via=tenants.replica).redeem(query["code"])  # not used up
    assert redeemed.status_code == 200, redeemed.text
    tokens = redeemed.json()
    refreshed = at_b.refresh(tokens["refresh_token"])
    assert (refreshed.status_code, refreshed.json()["error"]) == (400, "invalid_grant")
    for token, hint in (
        (tokens["refresh_token"], "refresh_token"),
        (tokens["access_token"], "access_token"),
    ):
        assert at_b.revoke(token, hint).status_code == 200  # RFC 7009: unknown here
    again = at_a.refresh(tokens["refresh_token"])  # neither spent nor revoked at A
    assert again.status_code == 200, again.text


def test_consent_given_at_one_tenant_is_asked_again_at_the_other(tenants):
    client_id = tenants.document_client("web", WEB)
    at_a = BrokerClient(tenants.mcp("a"), client_id=client_id, redirect=WEB)
    at_b = replace(at_a, mcp=tenants.mcp("b"))
    with httpx.Client() as browser:  # one browser: the host's cookies go to both routes
        page = browser.get(at_a.authorize_url())
        assert page.status_code == 200
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        allowed = browser.post(
            f"{tenants.mcp('a')}/oauth/authorize",
            data={"request": request_id, "decision": "allow"},
            headers={"Origin": tenants.public},
        )
        assert allowed.status_code == 302, allowed.text
        remembered = browser.get(at_a.authorize_url())
        assert remembered.status_code == 302  # the control: remembered at A
        other = browser.get(at_b.authorize_url())
    assert other.status_code == 200, other.headers.get("location")
    assert "Document client web" in other.text


def run_py_client(url: str, *extra: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(PEERS / "py_client.py"), url, "alice", "x", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_real_clients_sign_in_at_each_tenant_as_clients_of_its_own(tenants):
    reports = {t: run_py_client(tenants.mcp(t)) for t in TENANTS}
    for tenant, report in reports.items():
        assert report["ok"], report
        assert report["result"] == "5"
        assert report["authorize"] == f"{tenants.mcp(tenant)}/oauth/authorize"
        assert report["met"][0][0] == "consent"
    typescript = {t: run_ts_client(tenants.mcp(t), "alice", "x", "client2") for t in TENANTS}
    for tenant, report in typescript.items():
        assert report["ok"], report
        assert report["callback"]["iss"] == tenants.mcp(tenant)
        assert report["met"][0][0] == "consent"
    # A client of each route's own (the SDKs keep a registration per issuer, too).
    ids = [r["client_id"] for r in reports.values()] + [r["clientId"] for r in typescript.values()]
    assert len(set(ids)) == 4


def test_a_client_id_from_before_the_upgrade_is_told_to_register_again(tenants, redis_url):
    # As an earlier version signed them, with the secret the replicas share: no route in it.
    with redis.Redis.from_url(redis_url) as store:
        secret = store.get(f"{PREFIX}secret")
    assert isinstance(secret, bytes)
    body = clients._b64(orjson.dumps({"n": "Old", "r": [REDIRECT], "t": 1, "i": "x"}))
    old = BrokerClient(
        tenants.mcp("a"), f"{clients.DCR_PREFIX}{body}.{clients._sign(secret, body)}"
    )
    expected = {
        "error": "invalid_client",
        "error_description": f"client_id {old.client_id[:80]!r} was issued by an earlier "
        "version of this gateway, before client ids were bound to one MCP server; register "
        f"again through this server's registration_endpoint {registration_endpoint(tenants, 'a')}",
    }
    for answer in (httpx.get(old.authorize_url()), old.refresh("a-refresh-token")):
        assert (answer.status_code, answer.json()) == (400, expected)
