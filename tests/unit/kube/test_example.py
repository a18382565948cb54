"""The Kubernetes guide's example (docs/kubernetes.md, examples/kubernetes): with the
ReferenceGrant it tells the user to apply, the policy is Accepted and Attached; without it,
not (and the route fails closed). Built by the same function the controller uses, as the API
server's objects."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import yaml

from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.cluster_secrets import SECRET_READER_ROLE, ClusterSecrets
from mcp_oauth_gateway.resources.loader import load_paths

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "kubernetes"


def build(skip: str = ""):
    files = [p for p in sorted(EXAMPLE.glob("*.yaml")) if p.name != skip]
    loaded = load_paths(files)
    assert loaded.errors == []
    return build_from_objects(
        [item.resource for item in loaded.resources],
        at="2026-01-01T00:00:00Z",
        deployment=Deployment(processes=2, cluster=Cluster()),
    )


def test_the_example_is_accepted_and_attached_with_its_reference_grant() -> None:
    result = build()
    (report,) = result.snapshot.policies
    assert {c.type: c.status for c in report.conditions} == {"Accepted": True, "Attached": True}
    assert list(result.snapshot.keysets) == [
        "http://authentik.authentik.svc.cluster.local:9000/application/o/mcp/jwks/"
    ]
    assert report.ancestors == ("mcp/mcp-gateway",)
    assert set(result.snapshot.listeners) == {8080}


def test_without_the_reference_grant_the_policy_is_not_accepted_and_the_route_fails_closed() -> (
    None
):
    result = build(skip="referencegrant.yaml")
    (report,) = result.snapshot.policies
    accepted = next(c for c in report.conditions if c.type == "Accepted")
    assert not accepted.status
    assert "needs a ReferenceGrant in namespace authentik" in accepted.message
    routes = result.snapshot.listeners[8080]
    assert routes
    assert all(route.policy is not None and route.policy.invalid for route in routes)


def test_broker_mode_across_replicas_needs_redis_and_says_how_to_give_it() -> None:
    files = sorted(EXAMPLE.glob("*.yaml"))
    loaded = load_paths(files)
    objects = []
    for item in loaded.resources:
        resource = item.resource
        if resource.kind == "GatewayPolicy":
            document = resource.model_dump(by_alias=True, exclude_none=True)
            document["spec"]["traffic"]["jwtAuthentication"]["mcp"]["authorizationServerMode"] = (
                "Broker"
            )
            resource = type(resource).model_validate(document)
        objects.append(resource)
    label = "several replicas (controller mode; give --replicas 1 if only one serves)"
    several = Deployment(processes=2, processes_label=label, cluster=Cluster())
    (report,) = build_from_objects(objects, at="T", deployment=several).snapshot.policies
    accepted = next(c for c in report.conditions if c.type == "Accepted")
    assert not accepted.status
    assert "broker.redisUrl is required when Broker mode is served by several replicas" in (
        accepted.message
    )
    assert "--replicas 1" in accepted.message
    one = Deployment(processes=1, cluster=Cluster())
    (report,) = build_from_objects(objects, at="T", deployment=one).snapshot.policies
    assert report.ok, report.conditions


CREDENTIALS = EXAMPLE / "backend-credentials"


def merge_patch(target: object, patch: object) -> object:
    """RFC 7396 JSON merge patch (what `kubectl patch --type merge` applies)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def patched_objects() -> list:
    patch = yaml.safe_load((CREDENTIALS / "policy-patch.yaml").read_text())
    objects = []
    for item in load_paths(sorted(EXAMPLE.glob("*.yaml"))).resources:
        resource = item.resource
        if resource.kind == "GatewayPolicy":
            document = resource.model_dump(by_alias=True, exclude_none=True)
            resource = type(resource).model_validate(merge_patch(document, patch))
        objects.append(resource)
    return objects


def build_patched(read: ClusterSecrets):
    cluster = Cluster(secrets=read)
    return build_from_objects(
        patched_objects(), at="T", deployment=Deployment(processes=2, cluster=cluster)
    )


def test_the_credentials_patch_names_a_secret_the_binding_lets_the_controller_read() -> None:
    """The Secret is in the policy's namespace, and secret-reader.yaml binds deploy/'s
    Secret-reading ClusterRole there for deploy/'s ServiceAccount."""
    patch = yaml.safe_load((CREDENTIALS / "policy-patch.yaml").read_text())
    ref = patch["spec"]["backend"]["credentials"]["tokenExchange"]["clientSecret"]["secretRef"]
    assert set(ref) == {"name", "key"}  # no namespace: the policy's own
    binding = yaml.safe_load((CREDENTIALS / "secret-reader.yaml").read_text())
    (policy,) = [o for o in patched_objects() if o.kind == "GatewayPolicy"]
    assert binding["metadata"]["namespace"] == policy.metadata.namespace
    deploy = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]
    (account,) = [d for d in deploy if d["kind"] == "ServiceAccount"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": SECRET_READER_ROLE,
    }
    assert any(
        d["kind"] == "ClusterRole" and d["metadata"]["name"] == SECRET_READER_ROLE for d in deploy
    )
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": "mcp-oauth-gateway",
        }
    ]


def test_until_the_secret_is_read_the_credentials_patch_fails_closed() -> None:
    forbidden = "the gateway's controller may not read Secrets in namespace mcp (forbidden)"
    for read, expected in (
        (ClusterSecrets(listed=frozenset({"mcp"})), "Secret mcp/mcp-backend-credentials not found"),
        (ClusterSecrets(unreadable=MappingProxyType({"mcp": forbidden})), forbidden),
    ):
        (report,) = build_patched(read).snapshot.policies
        accepted = next(c for c in report.conditions if c.type == "Accepted")
        assert not accepted.status
        assert (
            "spec.backend.credentials.tokenExchange.clientSecret: secretRef: " in accepted.message
        )
        assert expected in accepted.message


def test_with_the_secret_read_the_credentials_patch_is_accepted() -> None:
    data = {("mcp", "mcp-backend-credentials"): {"token-exchange-client-secret": b"s3cret\n"}}
    result = build_patched(ClusterSecrets(MappingProxyType(data), frozenset({"mcp"})))
    (report,) = result.snapshot.policies
    assert report.ok, report.conditions
    assert "s3cret" not in repr(result.snapshot)


def test_kubectl_apply_of_the_directory_creates_each_namespace_before_its_objects() -> None:
    # kubectl applies a directory's files in name order, each object in turn: an object in a
    # namespace not created yet fails the apply.
    created: set[str] = set()
    for path in sorted(EXAMPLE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc["kind"] == "Namespace":
                created.add(doc["metadata"]["name"])
            namespace = doc["metadata"].get("namespace")
            assert namespace is None or namespace in created, f"{path.name}: {namespace}"


def test_the_loader_reads_namespaces_for_their_labels_alone() -> None:
    loaded = load_paths([EXAMPLE / "00-namespaces.yaml"])
    assert loaded.errors == []
    assert sorted(r.resource.metadata.name for r in loaded.resources) == ["authentik", "mcp"]
    assert {r.resource.kind for r in loaded.resources} == {"Namespace"}
