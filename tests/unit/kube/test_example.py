"""The Kubernetes guide's example (docs/kubernetes.md, examples/kubernetes): with the
ReferenceGrant it tells the user to apply, the policy is Accepted and Attached; without it,
not (and the route fails closed). Built by the same function the controller uses, as the API
server's objects."""

from __future__ import annotations

from pathlib import Path

import yaml

from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.resources.loader import load_paths

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "kubernetes"


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


def patched_objects(secret_file: Path | None = None) -> list:
    patch = yaml.safe_load((CREDENTIALS / "policy-patch.yaml").read_text())
    if secret_file is not None:
        patch["spec"]["backend"]["credentials"]["tokenExchange"]["clientSecret"] = {
            "file": str(secret_file)
        }
    objects = []
    for item in load_paths(sorted(EXAMPLE.glob("*.yaml"))).resources:
        resource = item.resource
        if resource.kind == "GatewayPolicy":
            document = resource.model_dump(by_alias=True, exclude_none=True)
            resource = type(resource).model_validate(merge_patch(document, patch))
        objects.append(resource)
    return objects


def test_the_credentials_patch_names_a_file_in_the_mounted_secret() -> None:
    """The policy patch reads its secret from where the overlay mounts the Secret; without the
    file (this machine is not the pod) the policy fails closed, naming the field and path."""
    mount = yaml.safe_load((CREDENTIALS / "secret-mount.yaml").read_text())
    (container,) = mount["spec"]["template"]["spec"]["containers"]
    (volume_mount,) = container["volumeMounts"]
    patch = yaml.safe_load((CREDENTIALS / "policy-patch.yaml").read_text())
    secret = Path(patch["spec"]["backend"]["credentials"]["tokenExchange"]["clientSecret"]["file"])
    assert str(secret.parent) == volume_mount["mountPath"]
    assert volume_mount["readOnly"] is True

    result = build_from_objects(
        patched_objects(),
        at="T",
        deployment=Deployment(processes=2, cluster=Cluster()),
    )
    (report,) = result.snapshot.policies
    accepted = next(c for c in report.conditions if c.type == "Accepted")
    assert not accepted.status
    assert "spec.backend.credentials.tokenExchange.clientSecret" in accepted.message
    assert str(secret) in accepted.message


def test_with_the_secret_in_place_the_credentials_patch_is_accepted(tmp_path: Path) -> None:
    secret = tmp_path / "token-exchange-client-secret"
    secret.write_text("s3cret\n")
    result = build_from_objects(
        patched_objects(secret),
        at="T",
        deployment=Deployment(processes=2, cluster=Cluster()),
    )
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


def test_the_loader_reads_nothing_from_namespaces_and_refuses_nothing_for_them() -> None:
    loaded = load_paths([EXAMPLE / "00-namespaces.yaml"])
    assert (loaded.errors, loaded.resources) == ([], [])
