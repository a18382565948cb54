"""Tenants' credentials come only from their own namespace, on a full Kubernetes API server
(the `kube_apiserver` fixture: RBAC on, ServiceAccount tokens, an audit log).

The install is `kubectl apply -k deploy/`; the controller runs as its ServiceAccount with a
token from `kubectl create token`. The platform (the admin) runs one shared Gateway and opts
the tenant namespaces in to Secret reading with a RoleBinding to deploy/'s reader ClusterRole.
Each tenant is a namespace with a Role that may write GatewayPolicies, routes, backends,
ReferenceGrants and Secrets there only, used through `kubectl --as <tenant>`. Each tenant's MCP
server is a real `mcp` SDK server that refuses a request without its API key
(tests/peers/mcp_backend_apikey.py) and records every key it was sent.

The controller's own process holds a ServiceAccount token file and another tenant's key in its
environment (as a pod would); a tenant's policy naming either is refused and never sends it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from joserfc.jwk import RSAKey

from devcluster.apiserver import CRDS
from devcluster.cluster import DevCluster
from kube_support import ACCEPT, INITIALIZE, WAIT, service_account_kubeconfig, start_controller
from support import (
    PEERS,
    ROOT,
    Process,
    claims_for,
    free_port,
    jwks_of,
    mint,
    wait_for_port,
    wait_until,
)

INSTALL_NS = "mcp-oauth-gateway"
ACCOUNT_USER = f"system:serviceaccount:{INSTALL_NS}:mcp-oauth-gateway"
READER = "mcp-oauth-gateway-secret-reader"
ISSUER, AUDIENCE = "https://idp.tenants.example/", "mcp-tenants"
# tenant namespace -> the user who may write there (tenant-d never opted in to Secret reading).
TENANTS = {"tenant-a": "alice", "tenant-b": "bob", "tenant-c": "carol", "tenant-d": "dave"}
KEYS = {"tenant-a": "key-a-v1", "tenant-b": "key-b-v1", "tenant-c": "key-c-v1"}


@dataclass
class Backend:
    process: Process
    port: int
    key_file: Path

    def keys(self) -> list[str | None]:
        got: list[str | None] = httpx.get(f"http://127.0.0.1:{self.port}/debug/keys").json()
        return got


@dataclass
class Stack:
    cluster: DevCluster
    controller: Process
    admin: str
    gateway: str
    key: RSAKey
    backends: dict[str, Backend]
    token_file: Path

    def call(self, path: str) -> httpx.Response:
        token = mint(self.key, claims_for(ISSUER, AUDIENCE))
        headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
        return httpx.post(f"{self.gateway}{path}", json=INITIALIZE, headers=headers, timeout=10)

    def as_tenant(self, namespace: str, *documents: dict[str, Any]) -> None:
        """`kubectl --as <tenant> apply` in the tenant's namespace."""
        self.cluster.kubectl(
            "--as",
            TENANTS[namespace],
            "-n",
            namespace,
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(documents),
        )

    def accepted(self, namespace: str, name: str) -> dict[str, Any]:
        found = self.cluster.kubectl("get", "gatewaypolicy", name, "-n", namespace, "-o", "json")
        conditions = json.loads(found.stdout).get("status", {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Accepted"), {})

    def wait_accepted(self, namespace: str, name: str, status: str) -> dict[str, Any]:
        wait_until(
            lambda: self.accepted(namespace, name).get("status") == status,
            WAIT,
            f"GatewayPolicy {namespace}/{name} Accepted={status}",
        )
        return self.accepted(namespace, name)

    def secret_calls(self) -> list[dict[str, Any]]:
        """Every request for Secrets the controller made, as the API server logged it."""
        return [
            e["objectRef"]
            for e in self.cluster.audit_events(ACCOUNT_USER)
            if (e.get("objectRef") or {}).get("resource") == "secrets"
        ]


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}


def route(name: str, path: str, backend: Backend) -> list[dict[str, Any]]:
    """An HTTPRoute on the shared Gateway and the GatewayBackend it sends to."""
    static = {"host": "127.0.0.1", "port": backend.port, "path": "/mcp"}
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": name},
            "spec": {
                "parentRefs": [{"name": "shared", "namespace": "gateway-infra"}],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                        "backendRefs": [
                            {
                                "group": "mcp-oauth-gateway.dev",
                                "kind": "GatewayBackend",
                                "name": name,
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayBackend",
            "metadata": {"name": name},
            "spec": {"mcp": {"targets": [{"name": "t", "static": static}]}},
        },
    ]


def policy(name: str, source: dict[str, Any], key: RSAKey) -> dict[str, Any]:
    """A policy on the route `name` sending its backend the header X-Api-Key from `source`."""
    provider = {
        "issuer": ISSUER,
        "audiences": [AUDIENCE],
        "jwks": {"inline": json.dumps(jwks_of(key))},
    }
    return {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayPolicy",
        "metadata": {"name": name},
        "spec": {
            "targetRefs": [{"kind": "HTTPRoute", "name": name}],
            "traffic": {"jwtAuthentication": {"providers": [provider]}},
            "backend": {"credentials": {"secretHeader": {"header": "X-Api-Key", "value": source}}},
        },
    }


def platform(cluster: DevCluster, gateway_port: int) -> None:
    """The Gateway API CRDs, deploy/, a shared Gateway, and each tenant's namespace and Role;
    Secret reading opted in for every tenant but tenant-d."""
    for crd in sorted(CRDS.glob("*.gateway.networking.k8s.io.yaml")):
        cluster.kubectl("apply", "-f", str(crd))
    cluster.kubectl("apply", "-k", str(ROOT / "deploy"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    listener = {
        "name": "http",
        "port": gateway_port,
        "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": "All"}},
    }
    gateway_api = "gateway.networking.k8s.io/v1"
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gateway-infra"}},
        {
            "apiVersion": gateway_api,
            "kind": "GatewayClass",
            "metadata": {"name": "mcp"},
            "spec": {"controllerName": "mcp-oauth-gateway.dev/gateway-controller"},
        },
        {
            "apiVersion": gateway_api,
            "kind": "Gateway",
            "metadata": {"name": "shared", "namespace": "gateway-infra"},
            "spec": {"gatewayClassName": "mcp", "listeners": [listener]},
        },
    ]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    resources = (
        "gatewaypolicies.mcp-oauth-gateway.dev,gatewaybackends.mcp-oauth-gateway.dev,"
        "httproutes.gateway.networking.k8s.io,referencegrants.gateway.networking.k8s.io,secrets"
    )
    for namespace, user in TENANTS.items():
        cluster.kubectl("create", "namespace", namespace)
        cluster.kubectl(
            "create", "role", "tenant", "-n", namespace, f"--resource={resources}",
            "--verb=get,list,watch,create,update,patch,delete",
        )  # fmt: skip
        cluster.kubectl(
            "create", "rolebinding", "tenant", "-n", namespace, "--role=tenant", f"--user={user}"
        )
        if namespace != "tenant-d":
            opt_in(cluster, namespace)


def opt_in(cluster: DevCluster, namespace: str) -> None:
    """What deploy/rbac.yaml says a namespace does to let the controller read its Secrets."""
    cluster.kubectl(
        "create", "rolebinding", READER, "-n", namespace, f"--clusterrole={READER}",
        f"--serviceaccount={INSTALL_NS}:mcp-oauth-gateway",
    )  # fmt: skip


def start_backend(name: str, key: str, logs: Path, tmp: Path) -> Backend:
    port, key_file = free_port(), tmp / f"{name}.key"
    key_file.write_text(key)
    command = [sys.executable, str(PEERS / "mcp_backend_apikey.py"), str(port), str(key_file)]
    return Backend(Process(f"secret-refs-{name}", command, logs), port, key_file)


@pytest.fixture(scope="module")
def stack(
    kube_apiserver: DevCluster,
    logs: Path,
    idp_key: tuple[RSAKey, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    cluster, tmp = kube_apiserver, tmp_path_factory.mktemp("secret-refs")
    gateway_port = free_port()
    platform(cluster, gateway_port)
    backends = {
        "a": start_backend("a", KEYS["tenant-a"], logs, tmp),
        "b": start_backend("b", KEYS["tenant-b"], logs, tmp),
        "steal": start_backend("steal", "nothing-may-reach-this", logs, tmp),
        "borrow": start_backend("borrow", KEYS["tenant-c"], logs, tmp),
    }
    kubeconfig = service_account_kubeconfig(cluster, INSTALL_NS, "mcp-oauth-gateway", tmp / "kc")
    # What the pod holds: its ServiceAccount token mounted as a file, another tenant's key in
    # its environment (as env.valueFrom.secretKeyRef would put it there).
    token_file = tmp / "serviceaccount" / "token"
    token_file.parent.mkdir()
    token_file.write_text(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])
    env = {"TENANT_B_API_KEY": KEYS["tenant-b"]}
    process, admin_port = start_controller(
        kubeconfig, INSTALL_NS, "secret-refs-0", logs, "--log-level", "debug", env=env
    )
    try:
        for backend in backends.values():
            wait_for_port(backend.port, backend.process)
        wait_for_port(admin_port, process)
        wait_for_port(gateway_port, process, timeout=WAIT)
        yield Stack(
            cluster,
            process,
            f"http://127.0.0.1:{admin_port}",
            f"http://127.0.0.1:{gateway_port}",
            idp_key[0],
            backends,
            token_file,
        )
    finally:
        process.stop()
        for backend in backends.values():
            backend.process.stop()


@pytest.fixture(scope="module")
def tenants(stack: Stack) -> Stack:
    """Tenants a and b, each with a Secret of its own and a route whose policy sends it."""
    for namespace, backend, path in (("tenant-a", "a", "/a"), ("tenant-b", "b", "/b")):
        ref = {"secretRef": {"name": "api-keys", "key": "backend"}}
        stack.as_tenant(
            namespace,
            secret("api-keys", backend=KEYS[namespace] + "\n"),
            # A Secret no policy names: never kept.
            secret("db-password", password=f"{namespace}-db-password"),
            *route("mcp", path, stack.backends[backend]),
            policy("mcp", ref, stack.key),
        )
    return stack


def test_a_tenants_secret_reaches_its_own_backend_as_the_header(tenants: Stack) -> None:
    denied = tenants.cluster.kubectl(
        "--as", "alice", "-n", "tenant-b", "get", "secret", "api-keys", check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr  # the tenants really are apart
    for namespace, backend, path in (("tenant-a", "a", "/a"), ("tenant-b", "b", "/b")):
        accepted = tenants.wait_accepted(namespace, "mcp", "True")
        assert accepted["reason"] == "Valid", accepted
        answer = tenants.call(path)
        assert answer.status_code == 200, answer.text
        assert tenants.backends[backend].keys()[-1] == KEYS[namespace]


def test_rotating_the_secret_changes_what_the_backend_gets_without_a_restart(
    tenants: Stack,
) -> None:
    tenants.wait_accepted("tenant-a", "mcp", "True")
    pid = tenants.controller.popen.pid
    backend = tenants.backends["a"]
    backend.key_file.write_text("key-a-v2")
    # The backend now refuses the old key: the gateway still sends it.
    assert tenants.call("/a").status_code == 401
    tenants.as_tenant("tenant-a", secret("api-keys", backend="key-a-v2"))
    wait_until(lambda: tenants.call("/a").status_code == 200, WAIT, "the rotated key")
    assert backend.keys()[-1] == "key-a-v2"
    assert tenants.controller.popen.poll() is None
    assert tenants.controller.popen.pid == pid


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ("token-file", "file: in a cluster a policy reads no file of the gateway's pod"),
        ("env", "env: in a cluster a policy cannot read the gateway's environment variables"),
    ],
)
def test_a_policy_naming_a_file_or_variable_of_the_gateway_is_refused_and_answers_503(
    tenants: Stack, source: str, field: str
) -> None:
    named = (
        {"file": str(tenants.token_file)} if source == "token-file" else {"env": "TENANT_B_API_KEY"}
    )
    tenants.as_tenant(
        "tenant-a",
        *route("steal", "/a/steal", tenants.backends["steal"]),
        policy("steal", named, tenants.key),
    )
    generation = json.loads(
        tenants.cluster.kubectl(
            "get", "gatewaypolicy", "steal", "-n", "tenant-a", "-o", "json"
        ).stdout
    )["metadata"]["generation"]

    def refused_now() -> bool:
        accepted = tenants.accepted("tenant-a", "steal")
        return (
            accepted.get("status") == "False" and accepted.get("observedGeneration") == generation
        )

    wait_until(refused_now, WAIT, "the stealing policy refused")
    message = tenants.accepted("tenant-a", "steal")["message"]
    assert message.startswith(f"spec.backend.credentials.secretHeader.value: {field}"), message
    assert "use secretRef" in message
    answer = tenants.call("/a/steal")
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"] == "policy_invalid"
    assert tenants.backends["steal"].keys() == []
    # Another tenant's route keeps working meanwhile.
    assert tenants.call("/b").status_code == 200


def test_another_tenants_secret_needs_its_grant_and_deleting_the_grant_revokes_it(
    tenants: Stack,
) -> None:
    tenants.cluster.kubectl(
        "--as",
        "carol",
        "-n",
        "tenant-c",
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(secret("api-keys", backend=KEYS["tenant-c"])),
    )

    def borrow(name: str) -> str:
        ref = {"secretRef": {"name": name, "key": "backend", "namespace": "tenant-c"}}
        tenants.as_tenant(
            "tenant-a",
            *route("borrow", "/a/borrow", tenants.backends["borrow"]),
            policy("borrow", ref, tenants.key),
        )
        wait_until(
            lambda: name in tenants.accepted("tenant-a", "borrow").get("message", ""),
            WAIT,
            f"the policy refused for {name}",
        )
        return str(tenants.accepted("tenant-a", "borrow")["message"])

    # Whether tenant-c has the Secret is not said: the same words for one it does not have.
    existing, absent = borrow("api-keys"), borrow("nope")
    assert existing.replace("api-keys", "nope") == absent
    assert "it needs a ReferenceGrant in namespace tenant-c" in existing
    borrow("api-keys")
    assert tenants.call("/a/borrow").status_code == 503
    # No grant: the controller never read tenant-c's Secrets.
    assert [c for c in tenants.secret_calls() if c.get("namespace") == "tenant-c"] == []

    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "lend-api-keys"},
        "spec": {
            "from": [
                {"group": "mcp-oauth-gateway.dev", "kind": "GatewayPolicy", "namespace": "tenant-a"}
            ],
            "to": [{"group": "", "kind": "Secret", "name": "api-keys"}],
        },
    }
    tenants.as_tenant("tenant-c", grant)
    tenants.wait_accepted("tenant-a", "borrow", "True")
    wait_until(lambda: tenants.call("/a/borrow").status_code == 200, WAIT, "the lent key")
    assert tenants.backends["borrow"].keys()[-1] == KEYS["tenant-c"]

    tenants.cluster.kubectl(
        "--as", "carol", "-n", "tenant-c", "delete", "referencegrant", "lend-api-keys"
    )
    accepted = tenants.wait_accepted("tenant-a", "borrow", "False")
    assert "it needs a ReferenceGrant in namespace tenant-c" in accepted["message"]
    assert tenants.call("/a/borrow").status_code == 503


def test_a_namespace_not_opted_in_is_told_which_role_to_bind(tenants: Stack) -> None:
    tenants.as_tenant(
        "tenant-d",
        secret("api-keys", backend="key-d"),
        *route("mcp", "/d", tenants.backends["steal"]),
        policy("mcp", {"secretRef": {"name": "api-keys", "key": "backend"}}, tenants.key),
    )
    accepted = tenants.wait_accepted("tenant-d", "mcp", "False")
    assert "may not read Secrets in namespace tenant-d" in accepted["message"], accepted
    assert f"RoleBinding there to the ClusterRole {READER}" in accepted["message"]
    assert tenants.call("/d").status_code == 503
    opt_in(tenants.cluster, "tenant-d")
    tenants.wait_accepted("tenant-d", "mcp", "True")


def test_secrets_are_read_per_namespace_only_where_a_policy_may_use_them(tenants: Stack) -> None:
    """Never across namespaces, never a `get`, and only the named Secrets are kept."""
    calls = tenants.secret_calls()
    assert calls, "the controller read no Secret"
    assert all(c.get("namespace") for c in calls), calls
    assert {c["namespace"] for c in calls} <= set(TENANTS)
    events = [
        e
        for e in tenants.cluster.audit_events(ACCOUNT_USER)
        if (e.get("objectRef") or {}).get("resource") == "secrets"
    ]
    assert {e["verb"] for e in events} <= {"list", "watch"}
    kept = httpx.get(f"{tenants.admin}/status", timeout=5).json()["controller"]["secretNamespaces"]
    assert kept["tenant-a"]["secrets"] == ["api-keys"]  # not db-password
    assert "key-a" not in json.dumps(kept)
    # No policy may use tenant-c's Secrets since the grant went: its watch is closed.
    assert "tenant-c" not in kept
    # No value ever reached the controller's log (debug lines included).
    written = tenants.controller.log()
    token = tenants.token_file.read_text()
    for value in (*KEYS.values(), "key-a-v2", "key-d", "tenant-a-db-password", token):
        assert value not in written
