"""What a user does with kubectl, on a full Kubernetes API server, for real.

The server (the `kube_apiserver` fixture, tools/dev_cluster.py) is kube-apiserver v1.36.4 with
etcd v3.6.8, kubectl v1.36.4 and Helm v4.3.1, all built from the Go module proxy: core kinds,
RBAC (`--authorization-mode RBAC`), discovery and OpenAPI, ServiceAccount tokens from the
TokenRequest API, and an audit log of every request a ServiceAccount makes. It has no nodes:
no kubelet, scheduler or controller-manager.

In file order, on one server: the Gateway API CRDs (the project's own schemas in
tests/devcluster/crds; deploy/ says to install them first), `kubectl apply -k deploy/` with
validation on, `kubectl apply -f examples/kubernetes/`, get/describe/explain, then the
controller run as deploy/rbac.yaml's ServiceAccount with a token from `kubectl create token`, so
a verb the install does not grant fails here as it would in a cluster.
"""

from __future__ import annotations

import json
import subprocess
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
from devcluster.cluster import TOOL, DevCluster
from kube_support import (
    ACCEPT,
    INITIALIZE,
    WAIT,
    calls_seen_by_the_server,
    service_account_kubeconfig,
    start_controller,
)
from mcp_oauth_gateway.controlplane.cluster_secrets import SECRET_READER_ROLE
from support import (
    NODE_DIR,
    ROOT,
    Process,
    claims_for,
    deploy_rbac_rules,
    free_port,
    mint,
    node,
    wait_for_port,
    wait_until,
)

INSTALL_NS = "mcp-oauth-gateway"
ACCOUNT = "mcp-oauth-gateway"
ACCOUNT_USER = f"system:serviceaccount:{INSTALL_NS}:{ACCOUNT}"
CLIENT_ID = "mcp-public"
# The project's own Gateway API CRD schemas (the official ones are for `make test-contracts`);
# Leases need no stand-in here: kube-apiserver serves coordination.k8s.io.
GATEWAY_API_CRDS = sorted(CRDS.glob("*.gateway.networking.k8s.io.yaml"))


def objects(text: str) -> list[tuple[str, str, str | None]]:
    """(kind.group as kubectl prints it, name, namespace) of each object in a YAML stream."""
    found = []
    for doc in yaml.safe_load_all(text):
        if doc:
            group = doc["apiVersion"].rpartition("/")[0]
            kind = doc["kind"].lower() + (f".{group}" if group else "")
            found.append((kind, doc["metadata"]["name"], doc["metadata"].get("namespace")))
    return found


@pytest.fixture(scope="module")
def cluster(kube_apiserver: DevCluster) -> DevCluster:
    """The server with the Gateway API CRDs installed and established, as deploy/ asks."""
    for crd in GATEWAY_API_CRDS:
        kube_apiserver.kubectl("apply", "--validate=strict", "-f", str(crd))
    names = [f"crd/{crd.name.removesuffix('.yaml')}" for crd in GATEWAY_API_CRDS]
    kube_apiserver.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    return kube_apiserver


@pytest.fixture(scope="module")
def deployed(cluster: DevCluster) -> str:
    """`kubectl apply -k deploy/`, validation on (strict: unknown fields are errors)."""
    return cluster.kubectl("apply", "--validate=strict", "-k", str(ROOT / "deploy")).stdout


@pytest.fixture(scope="module")
def examples(deployed: str, cluster: DevCluster) -> str:
    """`kubectl apply -f examples/kubernetes/`, as the example's README says."""
    path = ROOT / "examples" / "kubernetes"
    return cluster.kubectl("apply", "--validate=strict", "-f", f"{path}/").stdout


def test_a_cached_build_is_a_no_op(kube_apiserver: DevCluster) -> None:
    # `make test` runs `dev_cluster.py build` every time: cached, it builds and prints nothing.
    names = ("kube-apiserver", "kubectl", "etcd", "helm")
    before = {name: kube_apiserver.binary(name).stat().st_mtime_ns for name in names}
    result = subprocess.run(
        [sys.executable, str(TOOL), "build", "--quiet"], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert {name: kube_apiserver.binary(name).stat().st_mtime_ns for name in names} == before


def test_the_server_is_a_full_kubernetes_api_server(cluster: DevCluster) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.36.4"
    assert version["clientVersion"]["gitVersion"] == "v1.36.4"
    served = set(cluster.kubectl("api-resources", "-o", "name").stdout.split())
    expected = {
        "namespaces",
        "services",
        "secrets",
        "serviceaccounts",
        "clusterroles.rbac.authorization.k8s.io",
        "rolebindings.rbac.authorization.k8s.io",
        "leases.coordination.k8s.io",
        "deployments.apps",
        "poddisruptionbudgets.policy",
        "customresourcedefinitions.apiextensions.k8s.io",
        "httproutes.gateway.networking.k8s.io",
    }
    assert expected <= served, f"not served: {sorted(expected - served)}"
    helm = cluster.helm("version", "--template", "{{.Version}}").stdout
    assert helm == "v4.3.1"
    assert json.loads(cluster.helm("list", "--all-namespaces", "-o", "json").stdout) == []


def test_kubectl_apply_k_deploy_creates_every_object_with_validation_on(
    cluster: DevCluster, deployed: str
) -> None:
    rendered = objects(cluster.kubectl("kustomize", str(ROOT / "deploy")).stdout)
    assert len(rendered) == 14, rendered
    assert sorted(deployed.splitlines()) == sorted(f"{k}/{n} created" for k, n, _ in rendered)
    for kind, name, namespace in rendered:
        where = ["--namespace", namespace] if namespace else []
        assert cluster.kubectl("get", kind, name, *where, "-o", "name").stdout.strip() == (
            f"{kind}/{name}"
        )
    # Applied again, nothing changes: nothing in deploy/ fights what the server defaults.
    # (kubectl reports the PodDisruptionBudget "configured" every time: its spec.selector is
    # patchStrategy=replace, so client-side apply always sends it; the server stores nothing.)
    assert cluster.kubectl("diff", "-k", str(ROOT / "deploy")).stdout == ""
    before = versions(cluster)
    cluster.kubectl("apply", "--validate=strict", "-k", str(ROOT / "deploy"))
    assert versions(cluster) == before


def versions(cluster: DevCluster) -> dict[str, str]:
    """resourceVersion of each object of deploy/ as the server holds it."""
    listed = json.loads(cluster.kubectl("get", "-k", str(ROOT / "deploy"), "-o", "json").stdout)
    return {
        f"{item['kind']}/{item['metadata']['name']}": item["metadata"]["resourceVersion"]
        for item in listed["items"]
    }


def test_the_deployment_is_stored_but_runs_no_pod(cluster: DevCluster, deployed: str) -> None:
    # Without a controller-manager no ReplicaSet is made, and without a kubelet no pod would
    # run: the Deployment is only stored (the gateway itself runs below as a local process).
    deployment = json.loads(
        cluster.kubectl("get", "deployment", ACCOUNT, "-n", INSTALL_NS, "-o", "json").stdout
    )
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == ACCOUNT
    assert not deployment.get("status", {}).get("readyReplicas")
    pods = cluster.kubectl("get", "pods", "-n", INSTALL_NS, "-o", "name").stdout
    assert pods == ""


def test_validation_is_on_an_unknown_field_is_refused(cluster: DevCluster, deployed: str) -> None:
    policy = {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayPolicy",
        "metadata": {"name": "typo", "namespace": INSTALL_NS},
        "spec": {"targetRefs": [], "trafic": {}},
    }
    refused = cluster.kubectl(
        "apply", "--validate=strict", "-f", "-", stdin=json.dumps(policy), check=False
    )
    assert refused.returncode != 0
    assert 'unknown field "spec.trafic"' in refused.stderr, refused.stderr


def test_kubectl_apply_f_examples_creates_the_namespaces_first(
    cluster: DevCluster, examples: str
) -> None:
    lines = examples.splitlines()
    assert lines[:2] == ["namespace/mcp created", "namespace/authentik created"], examples
    assert "gatewaypolicy.mcp-oauth-gateway.dev/mcp-authn created" in lines
    listed = cluster.kubectl("get", "gatewaypolicies", "-n", "mcp").stdout.splitlines()
    assert listed[0].split() == ["NAME", "ACCEPTED", "ATTACHED", "RESOLVEDREFS", "AGE"]
    assert listed[1].split()[0] == "mcp-authn"


def test_kubectl_explain_describes_the_policy_fields(cluster: DevCluster, deployed: str) -> None:
    for field in ("gatewaypolicy.spec", "gatewaypolicy.spec.traffic", "gatewaybackend.spec"):
        explained = cluster.kubectl("explain", field).stdout
        assert "FIELDS:" in explained, explained
        assert "<no description>" not in explained, f"kubectl explain {field}:\n{explained}"
    spec = cluster.kubectl("explain", "gatewaypolicy.spec").stdout
    assert "targetRefs\t<[]Object> -required-" in spec, spec


# --- the controller, as deploy/rbac.yaml's ServiceAccount --------------------------------------


@dataclass
class Controller:
    process: Process
    admin: str
    gateway: str
    idp: str
    key: RSAKey
    pod: str

    def status(self) -> dict[str, Any]:
        state: dict[str, Any] = httpx.get(f"{self.admin}/status", timeout=5).json()["controller"]
        return state

    def token(self) -> str:
        return mint(self.key, claims_for(f"{self.idp}/application/o/mcp/", CLIENT_ID))

    def initialize(self, token: str | None) -> httpx.Response:
        headers = dict(ACCEPT)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.post(f"{self.gateway}/mcp", json=INITIALIZE, headers=headers, timeout=10)


def point_the_example_here(cluster: DevCluster, port: int, idp: str, backend: str) -> None:
    """`kubectl patch` the example to this machine: the listener on a free port, the MCP server
    and the OpenID provider on loopback (the example names in-cluster Services, which would send
    the gateway to DNS), the resource at the gateway's address."""
    listener = [{"op": "replace", "path": "/spec/listeners/0/port", "value": port}]
    cluster.kubectl(
        "patch", "gateway", "mcp-gateway", "-n", "mcp", "--type=json", "-p", json.dumps(listener)
    )
    host, backend_port = backend.rsplit(":", 1)
    static = {"host": host, "port": int(backend_port), "path": "/mcp"}
    target = {"spec": {"mcp": {"targets": [{"name": "mcp-server", "static": static}]}}}
    cluster.kubectl(
        "patch",
        "gatewaybackend",
        "mcp-backend",
        "-n",
        "mcp",
        "--type=merge",
        "-p",
        json.dumps(target),
    )
    provider = {
        "issuer": f"{idp}/application/o/mcp/",
        "audiences": [CLIENT_ID],
        "jwks": {"remote": {"url": f"{idp}/application/o/mcp/jwks/"}},
    }
    jwt = {
        "providers": [provider],
        "mcp": {"resourceMetadata": {"resource": f"http://127.0.0.1:{port}/mcp"}},
    }
    patch = {"spec": {"traffic": {"jwtAuthentication": jwt}}}
    cluster.kubectl(
        "patch", "gatewaypolicy", "mcp-authn", "-n", "mcp", "--type=merge", "-p", json.dumps(patch)
    )


@pytest.fixture(scope="module")
def controller(
    cluster: DevCluster,
    examples: str,
    logs: Path,
    idp_key: tuple[RSAKey, Path],
    backend: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Controller]:
    gateway_port, idp_port = free_port(), free_port()
    gateway, idp = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{idp_port}"
    idp_env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(idp_key[1]),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"{gateway}/mcp",
        "SLUG": "mcp",
    }
    idp_process = Process("kubectl-e2e-idp", [node(), str(NODE_DIR / "idp.mjs")], logs, env=idp_env)
    point_the_example_here(cluster, gateway_port, idp, backend)
    kubeconfig = service_account_kubeconfig(
        cluster, INSTALL_NS, ACCOUNT, tmp_path_factory.mktemp("sa") / "kubeconfig"
    )
    pod = "mcp-oauth-gateway-e2e-0"
    process, admin_port = start_controller(kubeconfig, INSTALL_NS, pod, logs)
    try:
        wait_for_port(idp_port, idp_process)
        wait_for_port(admin_port, process)
        wait_for_port(gateway_port, process, timeout=WAIT)
        yield Controller(process, f"http://127.0.0.1:{admin_port}", gateway, idp, idp_key[0], pod)
    finally:
        process.stop()
        idp_process.stop()


def test_the_policy_comes_up_accepted_attached_and_resolved(
    cluster: DevCluster, controller: Controller
) -> None:
    for condition in ("Accepted", "Attached", "ResolvedRefs"):
        cluster.kubectl(
            "wait",
            f"--for=condition={condition}",
            "--timeout=60s",
            "gatewaypolicy/mcp-authn",
            "--namespace",
            "mcp",
        )
    listed = cluster.kubectl("get", "gatewaypolicies", "-n", "mcp").stdout.splitlines()
    assert listed[1].split()[:4] == ["mcp-authn", "True", "True", "True"], listed
    cluster.kubectl(
        "wait", "--for=condition=Programmed", "--timeout=60s", "gateway/mcp-gateway", "-n", "mcp"
    )
    assert controller.initialize(None).status_code == 401
    answer = controller.initialize(controller.token())
    assert answer.status_code == 200, answer.text


def test_kubectl_describe_shows_the_policy_status(
    cluster: DevCluster, controller: Controller
) -> None:
    wait_until(
        lambda: (
            cluster.kubectl("get", "gatewaypolicy", "mcp-authn", "-n", "mcp").stdout.count("True")
            == 3
        ),
        WAIT,
        "the policy's status",
    )
    described = cluster.kubectl("describe", "gatewaypolicy", "mcp-authn", "-n", "mcp").stdout
    words = " ".join(described.split())
    for expected in (
        "Kind: GatewayPolicy",
        "Target Refs: Group: gateway.networking.k8s.io Kind: HTTPRoute Name: mcp",
        "Controller Name: mcp-oauth-gateway.dev/gateway-controller",
        "Message: Policy accepted Observed Generation: 2 Reason: Valid Status: True Type: Accepted",
        "Message: Keyset fetched Observed Generation: 2 Reason: ResolvedRefs Status: True",
    ):
        assert expected in words, f"{expected!r} not in:\n{described}"


def test_the_controller_holds_the_lease_in_its_namespace(
    cluster: DevCluster, controller: Controller
) -> None:
    def holder() -> str:
        found = cluster.kubectl(
            "get", "lease", "mcp-oauth-gateway", "-n", INSTALL_NS, "-o", "json", check=False
        )
        return json.loads(found.stdout)["spec"].get("holderIdentity", "") if found.stdout else ""

    wait_until(lambda: holder() == controller.pod, WAIT, "the Lease to name the replica")
    assert controller.status()["leader"] is True


def test_the_controller_makes_exactly_the_calls_rbac_grants_and_none_is_refused(
    cluster: DevCluster, controller: Controller
) -> None:
    granted = deploy_rbac_rules()
    wait_until(lambda: controller.status()["statusWrites"] > 0, WAIT, "a status write")

    def everything_asked() -> bool:
        return set(calls_seen_by_the_server(cluster, ACCOUNT_USER)) >= granted

    wait_until(everything_asked, WAIT, "every granted call in the audit log")
    seen = calls_seen_by_the_server(cluster, ACCOUNT_USER)
    # 401/403 only: the first `get` of the Lease is a 404 (it does not exist yet).
    denied = {call: codes for call, codes in seen.items() if codes & {401, 403}}
    assert denied == {}, f"RBAC denied: {denied}"
    assert set(seen) == granted, (
        f"asked but not granted: {sorted(set(seen) - granted)}; "
        f"granted but never asked: {sorted(granted - set(seen))}"
    )
    # The controller's own record says the same, and no status write failed.
    state = controller.status()
    made = {(c["verb"], c["apiGroup"], c["resource"]) for c in state["apiCalls"]}
    assert made == granted
    assert state["statusFailures"] == {}
    # What the install grants, as `kubectl auth can-i` says it: each rule yes, Secrets no.
    for verb, group, resource in sorted(granted):
        name = resource if not group else f"{resource.split('/')[0]}.{group}"
        sub = ["--subresource", resource.split("/")[1]] if "/" in resource else []
        answer = cluster.kubectl(
            "auth", "can-i", verb, name, *sub, "--as", ACCOUNT_USER, "-n", INSTALL_NS, check=False
        )
        assert answer.stdout.strip() == "yes", (verb, group, resource, answer.stdout)
    secrets = cluster.kubectl(
        "auth", "can-i", "list", "secrets", "--as", ACCOUNT_USER, "-A", check=False
    )
    assert secrets.stdout.strip() == "no"


def test_a_verb_the_role_lacks_is_refused_and_seen(
    cluster: DevCluster, controller: Controller, logs: Path, tmp_path: Path
) -> None:
    """The audit check above has teeth: a role without list/watch on Services (an optional
    kind the controller would quietly do without) shows up as the API server's 403s."""
    namespace, account = "reduced-rbac", "gateway"
    user = f"system:serviceaccount:{namespace}:{account}"
    docs = []
    for doc in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()):
        # The Secret reader role is bound by nothing (a namespace opts in): not copied.
        if doc["kind"] == "ServiceAccount" or doc["metadata"]["name"] == SECRET_READER_ROLE:
            continue
        doc["metadata"]["name"] = f"{namespace}-{doc['kind'].lower()}"
        if doc["kind"] in ("Role", "RoleBinding"):
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "ClusterRole":
            doc["rules"] = [rule for rule in doc["rules"] if "services" not in rule["resources"]]
        if "roleRef" in doc:
            role = "clusterrole" if doc["roleRef"]["kind"] == "ClusterRole" else "role"
            doc["roleRef"]["name"] = f"{namespace}-{role}"
            doc["subjects"] = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
        docs.append(doc)
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    kubeconfig = service_account_kubeconfig(cluster, namespace, account, tmp_path / "kubeconfig")
    # A controller name no GatewayClass uses: it reads every kind but serves and writes nothing.
    process, admin_port = start_controller(
        kubeconfig, namespace, "reduced-0", logs, "--controller-name", "mcp-oauth-gateway.dev/none"
    )
    try:
        wait_for_port(admin_port, process)

        def refused() -> dict[tuple[str, str, str], set]:
            seen = calls_seen_by_the_server(cluster, user)
            return {call: codes for call, codes in seen.items() if 403 in codes}

        wait_until(lambda: ("list", "", "services") in refused(), WAIT, "a refused list")
        assert set(refused()) <= {("list", "", "services"), ("watch", "", "services")}
    finally:
        process.stop()
