"""Workload identity on a real Kubernetes API server (kube-apiserver v1.36.4, tools/dev_cluster.py):
service-account tokens minted with `kubectl create token --audience …`, exchanged at the Broker's
token endpoint with the jwt-bearer grant, the cluster's keys read by the controller from the API
server's own `/openid/v1/jwks` (the server's `--service-account-issuer` is https, so it serves
its discovery), and the issued token used to call a tool of the real MCP backend (with a DPoP
proof at the token endpoint, a token bound to the agent's key).

The controller runs as deploy/rbac.yaml's ServiceAccount: reading the issuer's keys needs nothing
more than the API server grants every ServiceAccount by default. Not tried here: an assertion
that expired (the TokenRequest API mints tokens of 10 minutes at least, and tests never sleep);
the unit tests (tests/unit/broker/test_workload_grant.py) refuse expired ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from joserfc.jwk import ECKey

from devcluster.apiserver import CRDS
from devcluster.cluster import DevCluster
from dpop_rs_support import proof_for, thumbprint
from kube_support import (
    ACCEPT,
    INITIALIZE,
    WAIT,
    backend_object,
    backend_ref,
    gateway_class,
    gateway_object,
    listener,
    route_object,
    service_account_kubeconfig,
    start_controller,
)
from support import (
    ROOT,
    Process,
    free_port,
    jwks_of,
    mint,
    new_key,
    unverified_claims,
    wait_for_port,
)

INSTALL_NS = "mcp-oauth-gateway"
ACCOUNT = "mcp-oauth-gateway"
NS = "mcp"
AGENTS = "agents"
INTRUDERS = "intruders"
POLICY_GROUP = "mcp-oauth-gateway.dev"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ISSUER = "https://kubernetes.default.svc.cluster.local"
GATEWAY_API_CRDS = sorted(CRDS.glob("*.gateway.networking.k8s.io.yaml"))
# The users' provider: its keys inline, never contacted (the agents sign in without it).
USER_KEY = new_key("users")


def workload_issuer(gateway: str) -> dict[str, Any]:
    """The cluster as a workload issuer: its own keys, tokens minted for the Broker's token
    endpoint, accepted from the namespace AGENTS only."""
    same_namespace = f'jwt["kubernetes.io"].namespace == "{AGENTS}"'
    return {
        "issuer": ISSUER,
        "jwks": {"kubernetes": {}},
        "audiences": [f"{gateway}/mcp/oauth/token"],
        "authorization": {"policy": {"matchExpressions": [same_namespace]}},
        "scopes": ["mcp:tools"],
    }


def broker_policy(gateway: str) -> dict[str, Any]:
    """A Broker policy trusting the cluster's workloads, and the route's and tool's rules."""
    users = {
        "issuer": "http://127.0.0.1:9/application/o/users/",
        "audiences": ["mcp-public"],
        "jwks": {"inline": json.dumps(jwks_of(USER_KEY))},
    }
    mcp = {
        "provider": "ProviderB",
        "clientId": "mcp-public",
        "authorizationServerMode": "Broker",
        "resourceMetadata": {"resource": f"{gateway}/mcp"},
        "workloadIdentity": {"issuers": [workload_issuer(gateway)]},
    }
    agents_only = f'jwt.sub.startsWith("system:serviceaccount:{AGENTS}:")'
    tools = {"policy": {"matchExpressions": ['mcp.tool.name == "add"']}}
    return {
        "apiVersion": f"{POLICY_GROUP}/v1alpha1",
        "kind": "GatewayPolicy",
        "metadata": {"name": "agents", "namespace": NS},
        "spec": {
            "targetRefs": [{"kind": "HTTPRoute", "name": "mcp"}],
            "traffic": {
                "jwtAuthentication": {"providers": [users], "mcp": mcp},
                # The route's own rule: the agents' workloads (no user of the provider).
                "authorization": {"policy": {"matchExpressions": [agents_only]}},
            },
            # Its tool rule: `add` only.
            "backend": {"mcp": {"authorization": tools}},
        },
    }


def objects(gateway_port: int, backend: str) -> list[dict[str, Any]]:
    """The Gateway, route, backend and a Broker policy trusting the cluster's workloads."""
    gateway = f"http://127.0.0.1:{gateway_port}"
    route = route_object("mcp", NS, {"name": "gw"}, backend_ref("b"), "/mcp")
    # The Broker answers its authorization server metadata on this route too.
    metadata = "/.well-known/oauth-authorization-server/mcp"
    route["spec"]["rules"][0]["matches"].append({"path": {"type": "PathPrefix", "value": metadata}})
    return [
        gateway_class("mcp-oauth-gateway", "mcp-oauth-gateway.dev/gateway-controller"),
        gateway_object("gw", NS, "mcp-oauth-gateway", [listener(gateway_port)]),
        route,
        backend_object("b", NS, backend),
        broker_policy(gateway),
    ]


@dataclass
class Served:
    cluster: DevCluster
    gateway: str
    process: Process

    @property
    def token_endpoint(self) -> str:
        return f"{self.gateway}/mcp/oauth/token"

    def sa_token(self, namespace: str, name: str, audience: str | None = None) -> str:
        """`kubectl create token` as a workload's operator runs it."""
        return self.cluster.kubectl(
            "create",
            "token",
            name,
            "--namespace",
            namespace,
            "--audience",
            audience or self.token_endpoint,
            "--duration",
            "10m",
        ).stdout.strip()

    def exchange(self, assertion: str, **form: str) -> httpx.Response:
        body = {"grant_type": JWT_BEARER, "assertion": assertion, **form}
        return httpx.post(self.token_endpoint, data=body, timeout=10)


@pytest.fixture(scope="module")
def served(
    kube_apiserver: DevCluster, logs: Path, backend: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    cluster = kube_apiserver
    for crd in GATEWAY_API_CRDS:
        cluster.kubectl("apply", "-f", str(crd))
    cluster.kubectl("apply", "-k", str(ROOT / "deploy"))
    names = [f"crd/{crd.name.removesuffix('.yaml')}" for crd in GATEWAY_API_CRDS]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    for namespace in (NS, AGENTS, INTRUDERS):
        cluster.kubectl("create", "namespace", namespace)
    for namespace in (AGENTS, INTRUDERS):
        cluster.kubectl("create", "serviceaccount", "reader", "--namespace", namespace)
    gateway_port = free_port()
    manifest = yaml.safe_dump_all(objects(gateway_port, backend))
    cluster.kubectl("apply", "-f", "-", stdin=manifest)
    kubeconfig = service_account_kubeconfig(
        cluster, INSTALL_NS, ACCOUNT, tmp_path_factory.mktemp("wif") / "kubeconfig"
    )
    process, admin_port = start_controller(
        kubeconfig, INSTALL_NS, "mcp-oauth-gateway-wif-0", logs, "--replicas", "1"
    )
    try:
        wait_for_port(admin_port, process)
        wait_for_port(gateway_port, process, timeout=WAIT)
        for condition in ("Accepted", "Attached", "ResolvedRefs"):
            cluster.kubectl(
                "wait",
                f"--for=condition={condition}",
                "--timeout=60s",
                "gatewaypolicy/agents",
                "--namespace",
                NS,
            )
        yield Served(cluster, f"http://127.0.0.1:{gateway_port}", process)
    finally:
        process.stop()


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a streamable HTTP answer (JSON or SSE)."""
    if response.headers["content-type"].startswith("application/json"):
        return [response.json()]
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def mcp_session(served: Served, token: str, http: httpx.Client) -> dict[str, str]:
    """Initialize with `token`; the headers the session's next requests carry."""
    headers = {"Authorization": f"Bearer {token}", **ACCEPT}
    init = http.post(f"{served.gateway}/mcp", json=INITIALIZE, headers=headers)
    assert init.status_code == 200, init.text
    headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
    headers["MCP-Protocol-Version"] = INITIALIZE["params"]["protocolVersion"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    http.post(f"{served.gateway}/mcp", json=note, headers=headers)
    return headers


def call_tool(served: Served, headers: dict[str, str], http: httpx.Client, name: str) -> dict:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"a": 2, "b": 3} if name == "add" else {"n": 1}},
    }
    answer = http.post(f"{served.gateway}/mcp", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return messages(answer)[-1]


def test_the_api_server_serves_its_issuer_discovery(served: Served) -> None:
    discovery = json.loads(
        served.cluster.kubectl("get", "--raw", "/.well-known/openid-configuration").stdout
    )
    assert discovery["issuer"] == ISSUER
    keys = json.loads(served.cluster.kubectl("get", "--raw", "/openid/v1/jwks").stdout)
    assert keys["keys"]


def test_an_agent_gets_a_token_with_its_service_account_and_calls_a_tool(served: Served) -> None:
    metadata = httpx.get(
        f"{served.gateway}/.well-known/oauth-authorization-server/mcp", timeout=10
    ).json()
    assert JWT_BEARER in metadata["grant_types_supported"]
    answer = served.exchange(served.sa_token(AGENTS, "reader"), resource=f"{served.gateway}/mcp")
    assert answer.status_code == 200, answer.text
    issued = answer.json()
    assert issued["token_type"] == "Bearer"
    assert issued["scope"] == "mcp:tools"
    assert "refresh_token" not in issued
    with httpx.Client(timeout=10) as http:
        headers = mcp_session(served, issued["access_token"], http)
        listed = http.post(
            f"{served.gateway}/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=headers,
        )
        assert sorted(t["name"] for t in messages(listed)[-1]["result"]["tools"]) == ["add"]
        added = call_tool(served, headers, http, "add")
        assert added["result"]["content"][0]["text"] == "5", added
        # Nothing else: the tool its rules do not allow is refused at the gateway.
        counted = call_tool(served, headers, http, "count")
        assert "error" in counted or counted["result"].get("isError"), counted


def test_another_namespaces_service_account_is_refused(served: Served) -> None:
    answer = served.exchange(served.sa_token(INTRUDERS, "reader"))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "unauthorized_client"
    assert "system:serviceaccount:intruders:reader" in answer.json()["error_description"]


def test_a_token_for_another_audience_is_refused(served: Served) -> None:
    # What the API server gives by default (its own audience), and a token meant for another
    # service: neither is an assertion for this gateway.
    for audience in ("https://kubernetes.default.svc.cluster.local", "vault"):
        answer = served.exchange(served.sa_token(AGENTS, "reader", audience))
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "invalid_grant"
        assert "aud" in answer.json()["error_description"]


def test_a_replayed_assertion_is_refused(served: Served) -> None:
    assertion = served.sa_token(AGENTS, "reader")
    assert served.exchange(assertion).status_code == 200
    again = served.exchange(assertion)
    assert again.status_code == 400, again.text
    assert again.json()["error"] == "invalid_grant"
    assert "used already" in again.json()["error_description"]


def test_a_forged_token_is_refused(served: Served) -> None:
    # Right issuer, audience and subject, signed with a key the cluster does not hold.
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": f"system:serviceaccount:{AGENTS}:reader",
        "aud": [served.token_endpoint],
        "iat": now,
        "exp": now + 600,
        "kubernetes.io": {"namespace": AGENTS, "serviceaccount": {"name": "reader"}},
    }
    forged = mint(new_key("forged"), claims, {"typ": "JWT"})
    answer = served.exchange(forged)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_grant"


def test_an_agent_holding_a_dpop_key_gets_a_token_bound_to_it(served: Served) -> None:
    key = ECKey.generate_key("P-256")
    form = {"grant_type": JWT_BEARER, "assertion": served.sa_token(AGENTS, "reader")}
    proof = proof_for(key, None, served.token_endpoint)
    answer = httpx.post(served.token_endpoint, data=form, headers={"DPoP": proof}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["token_type"] == "DPoP"
    token = answer.json()["access_token"]
    assert unverified_claims(token)["cnf"] == {"jkt": thumbprint(key)}
    mcp = f"{served.gateway}/mcp"
    with httpx.Client(timeout=10) as http:
        bound = {"Authorization": f"DPoP {token}", "DPoP": proof_for(key, token, mcp), **ACCEPT}
        assert http.post(mcp, json=INITIALIZE, headers=bound).status_code == 200
        # Copied without the key: as a Bearer token it is refused.
        bearer = http.post(mcp, json=INITIALIZE, headers={"Authorization": f"Bearer {token}"})
        assert bearer.status_code == 401, bearer.text
        assert "DPoP-bound" in bearer.json()["error_description"]
