"""The Helm chart (deploy/helm/mcp-oauth-gateway), rendered by a real Helm (v4, built from the
Go module proxy by tools/dev_cluster.py): `helm lint --strict` is clean, and at default values
it renders exactly what the kustomize base (deploy/, rendered by a real kustomize) applies,
object for object, but the Namespace (Helm installs into a namespace it is given). Its values
change what they say and nothing else."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from kube_support import kustomize_render
from support import ROOT

CHART = ROOT / "deploy" / "helm" / "mcp-oauth-gateway"
NAMESPACE = "mcp-oauth-gateway"


def helm_binary() -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "dev_cluster.py"), "path", "helm"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"Helm is not built (make test builds it): {done.stderr}"
    return done.stdout.strip().splitlines()[-1]


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def rendered(*sets: str) -> list[dict[str, Any]]:
    flags = [f"--set={s}" for s in sets]
    done = helm("template", NAMESPACE, str(CHART), "-n", NAMESPACE, "--include-crds", *flags)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_helm_lint_is_clean() -> None:
    done = helm("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout
    assert "[ERROR]" not in done.stdout


def test_at_default_values_the_chart_is_the_kustomize_base_object_for_object() -> None:
    chart = keyed(rendered())
    base = keyed([o for o in kustomize_render() if o["kind"] != "Namespace"])
    assert sorted(chart) == sorted(base)
    for key, expected in base.items():
        assert chart[key] == expected, key


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = keyed(objects)[("Deployment", "mcp-oauth-gateway")]
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    return found


@pytest.mark.parametrize(
    ("sets", "expect"),
    [
        (("image.repository=reg.example/gw", "image.tag=1.2.3"), "image"),
        (("controllerName=example.com/other",), "--controller-name=example.com/other"),
        (("lease.durationSeconds=15",), "--lease-duration=15"),
        (("clusterDomain=corp.local",), "--cluster-domain=corp.local"),
        (("adminPort=9191",), "--admin-port=9191"),
        (("healthPort=9292",), "--health-port=9292"),
        (("drain.gracePeriodSeconds=20",), "--grace-period=20"),
    ],
)
def test_each_value_changes_what_it_says(sets: tuple[str, ...], expect: str) -> None:
    default, changed = container(rendered()), container(rendered(*sets))
    if expect == "image":
        assert changed["image"] == "reg.example/gw:1.2.3"
    else:
        assert expect in changed["args"]
        assert expect not in default["args"]
    if sets[0].startswith("adminPort"):
        # On the pod's loopback: no container port, nothing to probe or admit.
        assert "admin" not in {p["name"] for p in changed["ports"]}
    if sets[0].startswith("healthPort"):
        assert {"name": "health", "containerPort": 9292} in changed["ports"]


@pytest.mark.parametrize(
    ("sets", "wait", "termination"),
    [((), 5, 45), (("drain.gracePeriodSeconds=60",), 5, 75), (("drain.preStopSeconds=0",), 0, 40)],
)
def test_the_pod_waits_then_drains_within_its_termination_grace_period(
    sets: tuple[str, ...], wait: int, termination: int
) -> None:
    objects = rendered(*sets)
    pod = keyed(objects)[("Deployment", "mcp-oauth-gateway")]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == termination
    hook = container(objects).get("lifecycle", {}).get("preStop")
    assert hook == ({"exec": {"command": ["sleep", str(wait)]}} if wait else None)


MONITORING = "adminAccess.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring"


def network_policy(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return keyed(objects)[("NetworkPolicy", "mcp-oauth-gateway")]["spec"]


def test_probes_reach_the_health_listener_and_the_admin_listener_stays_on_loopback() -> None:
    found = container(rendered())
    assert "--health-host=0.0.0.0" in found["args"]
    assert not [arg for arg in found["args"] if arg.startswith("--admin-host")]
    assert found["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert found["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    # The NetworkPolicy admits the listener ports and nothing else (the probes come from the
    # node, which a NetworkPolicy always admits).
    policy = network_policy(
        rendered(
            "listeners[0].name=http",
            "listeners[0].port=8080",
            "listeners[1].name=https",
            "listeners[1].port=8443",
        )
    )
    assert policy["ingress"] == [
        {"ports": [{"port": "http", "protocol": "TCP"}, {"port": "https", "protocol": "TCP"}]}
    ]


def test_admin_access_opens_the_admin_listener_to_the_pods_it_names_alone() -> None:
    objects = rendered(MONITORING)
    found = container(objects)
    assert "--admin-host=0.0.0.0" in found["args"]
    assert {"name": "admin", "containerPort": 9090} in found["ports"]
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    assert network_policy(objects)["ingress"][1] == {
        "from": [{"namespaceSelector": selector}],
        "ports": [{"port": "admin", "protocol": "TCP"}],
    }
    pods = rendered(MONITORING, "adminAccess.podSelector.matchLabels.app=prometheus")
    (peer,) = network_policy(pods)["ingress"][1]["from"]
    assert peer == {
        "namespaceSelector": selector,
        "podSelector": {"matchLabels": {"app": "prometheus"}},
    }


def test_without_the_network_policy_the_admin_listener_stays_on_loopback() -> None:
    objects = rendered("networkPolicy.enabled=false")
    assert ("NetworkPolicy", "mcp-oauth-gateway") not in keyed(objects)
    assert not [arg for arg in container(objects)["args"] if arg.startswith("--admin-host")]


def test_listener_ports_and_replicas_reach_the_deployment_and_the_service() -> None:
    listeners = ("listeners[0].name=http", "listeners[0].port=8080")
    objects = rendered(
        "replicas=3", *listeners, "listeners[1].name=https", "listeners[1].port=8443"
    )
    assert keyed(objects)[("Deployment", "mcp-oauth-gateway")]["spec"]["replicas"] == 3
    assert {"name": "https", "containerPort": 8443} in container(objects)["ports"]
    service = keyed(objects)[("Service", "mcp-oauth-gateway")]
    assert {"name": "https", "port": 8443, "targetPort": "https"} in service["spec"]["ports"]


def test_the_redis_url_comes_from_a_secret_never_from_values() -> None:
    env = container(rendered("redis.existingSecret=gw-redis"))["env"]
    assert {
        "name": "MCP_OAUTH_GATEWAY_REDIS_URL",
        "valueFrom": {"secretKeyRef": {"name": "gw-redis", "key": "url"}},
    } in env


def test_user_tokens_are_off_unless_a_key_secret_is_named_and_then_mounted_group_readable() -> None:
    assert "--user-token-key" not in " ".join(container(rendered())["args"])
    objects = rendered("userTokens.keySecret=uk,userTokens.store.existingSecret=gw-tokens")
    gateway = container(objects)
    assert "--user-token-key=/etc/mcp-oauth-gateway/user-tokens/key" in gateway["args"]
    # The store's URL (with its password) comes from a Secret, never from values.
    assert "--user-token-store=$(USER_TOKEN_STORE)" in gateway["args"]
    assert {
        "name": "USER_TOKEN_STORE",
        "valueFrom": {"secretKeyRef": {"name": "gw-tokens", "key": "url"}},
    } in gateway["env"]
    pod = keyed(objects)[("Deployment", "mcp-oauth-gateway")]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "user-token-key"]
    # The key loader refuses a file others may read: 0440, read through the pod's group.
    assert volume["secret"] == {
        "secretName": "uk",
        "defaultMode": 0o440,
        "items": [{"key": "key", "path": "key"}],
    }
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    one = container(rendered("userTokens.keySecret=uk,replicas=1"))
    assert "--user-token-store=sqlite:///var/lib/mcp-oauth-gateway/user-tokens.db" in one["args"]


def test_secrets_are_readable_only_in_the_namespaces_listed() -> None:
    """By default no RoleBinding for the Secret reader role (nothing binds it); each
    namespace of secretNamespaces gets one, for the chart's ServiceAccount, and nothing else
    changes. A name that is not a namespace's is refused."""
    default = keyed(rendered())
    reader = default[("ClusterRole", "mcp-oauth-gateway-secret-reader")]
    assert reader["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}
    ]
    assert not [
        o
        for o in default.values()
        if o.get("roleRef", {}).get("name") == "mcp-oauth-gateway-secret-reader"
    ]
    objects = rendered("secretNamespaces={team-a,team-b}")
    bindings = [
        o for o in objects if o.get("roleRef", {}).get("name") == "mcp-oauth-gateway-secret-reader"
    ]
    assert sorted((b["kind"], b["metadata"]["namespace"]) for b in bindings) == [
        ("RoleBinding", "team-a"),
        ("RoleBinding", "team-b"),
    ]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "mcp-oauth-gateway", "namespace": NAMESPACE}
        ]
    assert [o for o in objects if o not in bindings] == list(rendered())
    done = helm(
        "template", NAMESPACE, str(CHART), "-n", NAMESPACE, "--set=secretNamespaces={Team_A}"
    )
    assert done.returncode != 0
    assert 'secretNamespaces: "Team_A" is not a namespace name' in done.stderr


def test_the_audit_trail_is_off_by_default_and_on_standard_output_when_asked() -> None:
    default = container(rendered())
    assert not [arg for arg in default["args"] if arg.startswith("--audit")]
    assert "volumeMounts" not in default
    on = container(rendered("audit.log=-", "audit.required=true"))
    assert on["args"][-2:] == ["--audit-log=-", "--audit-required"]
    assert "volumeMounts" not in on
    assert "--audit-required" not in container(rendered("audit.log=-"))["args"]


def test_an_audit_file_lives_on_a_volume_mounted_at_its_directory() -> None:
    objects = rendered("audit.log=/var/log/gateway/audit.log")
    found = container(objects)
    assert "--audit-log=/var/log/gateway/audit.log" in found["args"]
    assert found["volumeMounts"] == [{"name": "audit", "mountPath": "/var/log/gateway"}]
    pod = keyed(objects)[("Deployment", "mcp-oauth-gateway")]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "audit", "emptyDir": {}}]
    claimed = rendered(
        "audit.log=/audit/trail.log", "audit.volume.persistentVolumeClaim.claimName=audit"
    )
    pod = keyed(claimed)[("Deployment", "mcp-oauth-gateway")]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "audit", "persistentVolumeClaim": {"claimName": "audit"}}]


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        ("audit.required=true", 'audit.required needs audit.log ("-" for standard output'),
        ("audit.log=audit.log", 'audit.log "audit.log" must be "-" or an absolute file path'),
        ("healthPort=9090", "healthPort 9090 is adminPort too"),
        ("healthPort=0", "healthPort 0 is no port"),
        (
            "listeners[0].name=http,listeners[0].port=9091",
            "listeners[] http: port 9091 is adminPort or healthPort",
        ),
        (
            f"networkPolicy.enabled=false,{MONITORING}",
            "adminAccess needs networkPolicy.enabled",
        ),
        ("userTokens.keySecret=uk", "userTokens.store.existingSecret is required with several"),
        ("drain.gracePeriodSeconds=0", "drain.gracePeriodSeconds 0: give the seconds"),
        ("drain.preStopSeconds=-1", "drain.preStopSeconds -1: give the seconds"),
    ],
)
def test_a_value_that_cannot_work_is_refused_saying_why(sets: str, says: str) -> None:
    done = helm("template", NAMESPACE, str(CHART), "-n", NAMESPACE, f"--set={sets}")
    assert done.returncode != 0
    assert says in done.stderr


def test_a_listener_entry_left_empty_by_set_is_refused_saying_how_to_set_it() -> None:
    done = helm("template", NAMESPACE, str(CHART), "-n", NAMESPACE, "--set=listeners[1].port=1")
    assert done.returncode != 0
    assert "each listeners[] entry needs a name and a port" in done.stderr


def test_a_listener_name_that_cannot_be_a_port_name_is_refused_naming_it() -> None:
    done = helm(
        "template",
        NAMESPACE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--set=listeners[0].name=Bad_Name,listeners[0].port=8080",
    )
    assert done.returncode != 0
    assert 'listeners[].name "Bad_Name" must be a DNS label' in done.stderr


def test_helm_install_into_a_full_api_server_creates_what_kubectl_apply_would(
    kube_apiserver: Any,
) -> None:
    # A real kube-apiserver (RBAC, core kinds, discovery: tools/dev_cluster.py) stores what Helm
    # installs; no kubelet runs its pods. Then the chart upgrades and uninstalls cleanly.
    cluster = kube_apiserver
    installed = cluster.helm(
        "install", "gw", str(CHART), "--namespace", NAMESPACE, "--create-namespace", "--wait=false"
    )
    assert "STATUS: deployed" in installed.stdout, installed.stdout
    listed = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    crd = "customresourcedefinition.apiextensions.k8s.io/gatewaypolicies.mcp-oauth-gateway.dev"
    assert crd in listed
    for kind in ("deployment", "service", "serviceaccount", "role", "rolebinding", "pdb"):
        cluster.kubectl(
            "get",
            kind,
            "mcp-oauth-gateway" + ("-leader-election" if "role" in kind else ""),
            "-n",
            NAMESPACE,
        )
    for kind in ("clusterrole", "clusterrolebinding"):
        cluster.kubectl("get", kind, "mcp-oauth-gateway")
    upgraded = cluster.helm(
        "upgrade", "gw", str(CHART), "--namespace", NAMESPACE, "--set", "replicas=3"
    )
    assert "has been upgraded" in upgraded.stdout, upgraded.stdout
    replicas = cluster.kubectl(
        "get", "deployment", "mcp-oauth-gateway", "-n", NAMESPACE, "-o", "jsonpath={.spec.replicas}"
    ).stdout
    assert replicas == "3"
    cluster.helm("uninstall", "gw", "--namespace", NAMESPACE)
    gone = cluster.kubectl("get", "deployment", "mcp-oauth-gateway", "-n", NAMESPACE, check=False)
    assert gone.returncode != 0
