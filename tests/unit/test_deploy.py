"""The install manifests (deploy/) and the image (Dockerfile) agree with the program: the
arguments they give are ones `serve` accepts, the probes reach the health listener on the pod's
address while the admin listener stays on loopback, selectors select the pods, the
NetworkPolicy admits the listener ports alone, and the RBAC rules name exactly the calls the
controller's code can make (tests/e2e/test_kubernetes_example.py compares them with the calls a
running replica made)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_oauth_gateway.cli.flags import parser as _parser
from mcp_oauth_gateway.cli.serve import serve_options
from mcp_oauth_gateway.kube.options import controller_options
from support import controller_rbac_calls, deploy_rbac_rules, deploy_secret_reader_rules

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def one(kind: str) -> dict[str, Any]:
    found = [
        d
        for path in sorted(DEPLOY.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for d in documents(path.name)
        if d["kind"] == kind
    ]
    assert len(found) == 1, kind
    return found[0]


def test_the_roles_grant_exactly_the_calls_the_controller_makes() -> None:
    assert deploy_rbac_rules() | deploy_secret_reader_rules() == controller_rbac_calls()


def test_secrets_are_read_only_where_a_namespace_binds_the_reader_role() -> None:
    """No Secret anywhere by default: the reader role lists and watches Secrets, nothing binds
    it here (a namespace opts in with a RoleBinding), and no bound role names Secrets."""
    assert deploy_secret_reader_rules() == {("list", "", "secrets"), ("watch", "", "secrets")}
    assert not {call for call in deploy_rbac_rules() if call[2] == "secrets"}
    reader = next(
        d
        for d in documents("rbac.yaml")
        if d["kind"] == "ClusterRole" and "secret" in d["metadata"]["name"]
    )
    assert all(
        d.get("roleRef", {}).get("name") != reader["metadata"]["name"]
        for d in documents("rbac.yaml")
    )


def test_the_kustomization_lists_every_manifest_and_crd() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml"}
    present |= {f"crds/{p.name}" for p in (DEPLOY / "crds").glob("*.yaml")}
    assert listed == present


def test_the_deployment_runs_two_replicas_that_serve_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    args = _parser().parse_args(container["args"])
    options = controller_options(args)
    assert options.kubeconfig is None  # in-cluster
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_IPS": "status.podIPs",
    }
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    served = serve_options(args)
    # The probes reach the health listener on the pod's address; /config stays on loopback.
    assert (served.health_port, served.health_host) == (ports["health"], "0.0.0.0")
    assert served.status_port is not None
    assert served.admin_host == "127.0.0.1"
    assert "admin" not in ports
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["spec"]["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    # The preStop wait (load balancers stop sending connections) and then the drain
    # (--grace-period, 30 s by default) fit in the pod's termination grace period.
    wait = container["lifecycle"]["preStop"]["exec"]["command"]
    assert wait[0] == "sleep"
    assert int(wait[1]) > 0
    assert pod["spec"]["terminationGracePeriodSeconds"] > int(wait[1]) + served.grace_period


def test_selectors_select_the_pods() -> None:
    labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        selector = one(kind)["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert selector.items() <= labels.items(), kind
    assert one("PodDisruptionBudget")["spec"]["minAvailable"] == 1
    service_ports = {p["targetPort"] for p in one("Service")["spec"]["ports"]}
    container = one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert service_ports <= {p["name"] for p in container["ports"]} - {"admin", "health"}


def test_the_network_policy_admits_the_listener_ports_alone() -> None:
    policy = one("NetworkPolicy")
    labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert "from" not in rule  # clients come from anywhere
    admitted = {p["port"] for p in rule["ports"]}
    assert admitted == {p["targetPort"] for p in one("Service")["spec"]["ports"]}
    assert {p["protocol"] for p in rule["ports"]} == {"TCP"}


def test_the_role_bindings_name_the_service_account_in_its_namespace() -> None:
    namespace = one("Namespace")["metadata"]["name"]
    account = one("ServiceAccount")["metadata"]["name"]
    for doc in documents("rbac.yaml"):
        if doc["kind"].endswith("Binding"):
            assert doc["subjects"] == [
                {"kind": "ServiceAccount", "name": account, "namespace": namespace}
            ]


def test_the_image_command_is_one_serve_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    entry = json.loads(next(line for line in lines if line.startswith("ENTRYPOINT"))[11:])
    command = json.loads(next(line for line in lines if line.startswith("CMD"))[4:])
    assert entry == ["mcp-oauth-gateway"]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    controller_options(_parser().parse_args(command))
    user = next(line for line in lines if line.startswith("USER"))
    assert shlex.split(user)[1] != "root"
    deployment = one("Deployment")["spec"]["template"]["spec"]
    assert deployment["securityContext"]["runAsUser"] == int(shlex.split(user)[1].split(":")[0])
