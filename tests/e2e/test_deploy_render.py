"""`deploy/` rendered by a real kustomize (kubectl's, built by tools/dev_cluster.py): every
object lands in the controller's namespace, the image is the one set, the roles are exactly the
controller's calls, and the CRDs it installs are the ones a real API server accepts."""

from __future__ import annotations

from pathlib import Path

import yaml

from devcluster.apiserver import DevApiServer
from kube_support import kustomize_render as render
from support import controller_rbac_calls

CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}


def test_deploy_renders_into_one_namespace_with_the_image_and_exact_roles() -> None:
    objects = render()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment",
            "Namespace",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    )
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, obj["kind"]
        else:
            assert namespace == "mcp-oauth-gateway", obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "mcp-oauth-gateway"
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "mcp-oauth-gateway:0.1.0"
    granted = {
        (verb, group, resource)
        for role in objects
        if role["kind"] in ("ClusterRole", "Role")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == controller_rbac_calls()


def test_the_rendered_crds_are_served_by_a_real_api_server(
    apiserver: DevApiServer, tmp_path: Path
) -> None:
    paths = []
    for crd in (o for o in render() if o["kind"] == "CustomResourceDefinition"):
        path = tmp_path / f"{crd['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(crd))
        paths.append(path)
    # Created or replaced, then waited for until Established and every version is served.
    apiserver.apply_crds(paths)
    plurals = {yaml.safe_load(p.read_text())["spec"]["names"]["plural"] for p in paths}
    assert plurals == {"gatewaypolicies", "gatewaybackends", "gatewayclassparameters"}
