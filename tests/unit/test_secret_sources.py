"""Where a policy's secrets may come from (controlplane/secret_sources.py): what each source is
allowed in each mode, a namespace's directory under `--secret-files-dir` (symbolic links
resolved, `..` refused), ReferenceGrants for a Secret in another namespace (and a refusal that
never says whether it exists), the Secrets the controller reads, and the messages, none of
which ever holds a value."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import MappingProxyType

import httpx
import pytest
import yaml

from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.cluster_secrets import ClusterSecrets
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.controlplane.objects import Entry
from mcp_oauth_gateway.controlplane.secret_sources import (
    MAX_SECRET_BYTES,
    SecretError,
    SecretScope,
    file_refusal,
    read_secret,
    wanted_secrets,
)
from mcp_oauth_gateway.resources.models import KINDS, GatewayPolicy, ReferenceGrant, SecretSource
from mcp_oauth_gateway.serving.admin import config_dump
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from support import new_key

VALUE = "tenant-a-api-key-0123"
JWKS = json.dumps({"keys": [new_key("k").as_dict(private=False)]})
REF = {"secretRef": {"name": "keys", "key": "api"}}


def secrets(data: dict[tuple[str, str], dict[str, bytes]], *listed: str) -> ClusterSecrets:
    namespaces = frozenset(listed) | {namespace for namespace, _ in data}
    return ClusterSecrets(MappingProxyType(data), namespaces)


def cluster_scope(
    namespace: str = "tenant-a",
    files_dir: str | None = None,
    read: ClusterSecrets | None = None,
    grants: dict[str, Entry[ReferenceGrant]] | None = None,
) -> SecretScope:
    cluster = Cluster(secret_files_dir=files_dir, secrets=read or ClusterSecrets())
    return SecretScope(namespace, cluster, grants or {}, environ={"TENANT_B_KEY": "b-key"})


def source(value: dict) -> SecretSource:
    return SecretSource.model_validate(value)


def refusal(value: dict, scope: SecretScope) -> str:
    with pytest.raises(SecretError) as caught:
        read_secret(source(value), scope)
    return str(caught.value)


# --- what each source is allowed in each mode ------------------------------------------------


def test_from_files_file_and_env_are_read_and_secret_ref_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(VALUE + "\n")
    files = SecretScope(environ={"KEY": VALUE})
    assert read_secret(source({"file": str(path)}), files) == VALUE
    assert read_secret(source({"env": "KEY"}), files) == VALUE
    assert refusal(REF, files) == (
        "secretRef names a Kubernetes Secret, which only the controller reads (serve "
        "--kubeconfig or --in-cluster); from resource files use file or env"
    )


def test_in_a_cluster_env_is_refused_and_names_secret_ref_as_the_fix() -> None:
    message = refusal({"env": "TENANT_B_KEY"}, cluster_scope())
    assert message.startswith("env: in a cluster a policy cannot read the gateway's environment")
    assert "put the secret in a Secret of namespace tenant-a and use secretRef" in message
    assert "b-key" not in message


@pytest.mark.parametrize(
    "path",
    [
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "/etc/passwd",
        "/proc/self/environ",
    ],
)
def test_in_a_cluster_no_file_is_read_without_the_operators_flag(path: str) -> None:
    message = refusal({"file": path}, cluster_scope())
    assert message == (
        "file: in a cluster a policy reads no file of the gateway's pod (the gateway runs "
        "without --secret-files-dir); put the secret in a Secret of namespace tenant-a and use "
        "secretRef: {name, key}"
    )


def test_in_a_cluster_a_secret_ref_reads_the_policys_own_namespace() -> None:
    read = secrets({("tenant-a", "keys"): {"api": VALUE.encode() + b"\n"}})
    assert read_secret(source(REF), cluster_scope(read=read)) == VALUE
    # The same name in another tenant's namespace is not what a policy of tenant-a gets.
    other = secrets({("tenant-b", "keys"): {"api": b"b-key"}}, "tenant-a")
    assert "Secret tenant-a/keys not found" in refusal(REF, cluster_scope(read=other))


# --- a namespace's directory under --secret-files-dir ----------------------------------------


@pytest.fixture
def files_dir(tmp_path: Path) -> Path:
    """DIR/tenant-a holding a Secret volume as the kubelet writes one (`..data` links), and
    DIR/tenant-b, DIR/tenant-ab beside it."""
    root = tmp_path / "secrets"
    own = root / "tenant-a"
    (own / "..2026_01_01").mkdir(parents=True)
    (own / "..2026_01_01" / "api").write_text(VALUE + "\n")
    (own / "..data").symlink_to("..2026_01_01")
    (own / "api").symlink_to("..data/api")
    for other in ("tenant-b", "tenant-ab"):
        (root / other).mkdir()
        (root / other / "api").write_text("not-yours")
    return root


def test_a_file_under_the_namespaces_directory_is_read_through_its_links(files_dir: Path) -> None:
    scope = cluster_scope(files_dir=str(files_dir))
    assert read_secret(source({"file": f"{files_dir}/tenant-a/api"}), scope) == VALUE


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("{d}/tenant-b/api", "is not under {d}/tenant-a/"),
        ("{d}/tenant-ab/api", "is not under {d}/tenant-a/"),  # a prefix is not a directory
        ("{d}/tenant-a/../tenant-b/api", "contains '..'"),
        ("{d}/tenant-a/..", "contains '..'"),
        ("{d}/tenant-a", "is not under {d}/tenant-a/"),
        ("{d}/tenant-a/.", "is not under {d}/tenant-a/"),
        ("/var/run/secrets/kubernetes.io/serviceaccount/token", "is not under {d}/tenant-a/"),
    ],
)
def test_a_file_outside_the_namespaces_directory_is_refused_by_its_name(
    files_dir: Path, path: str, expected: str
) -> None:
    path = path.format(d=files_dir)
    message = refusal({"file": path}, cluster_scope(files_dir=str(files_dir)))
    assert expected.format(d=files_dir) in message
    assert "not-yours" not in message


@pytest.mark.parametrize(
    "target", ["{d}/tenant-b/api", "/etc/hostname", "{d}/tenant-b", "{d}/tenant-a/../tenant-b/api"]
)
def test_a_link_out_of_the_namespaces_directory_is_refused(files_dir: Path, target: str) -> None:
    link = files_dir / "tenant-a" / "escape"
    link.symlink_to(target.format(d=files_dir))
    message = refusal({"file": str(link)}, cluster_scope(files_dir=str(files_dir)))
    assert f"leads (through a symbolic link) out of {files_dir}/tenant-a/" in message
    assert "not-yours" not in message


def test_a_directory_link_out_is_refused_for_every_file_under_it(files_dir: Path) -> None:
    (files_dir / "tenant-a" / "sub").symlink_to(files_dir / "tenant-b")
    path = f"{files_dir}/tenant-a/sub/api"
    assert "leads (through a symbolic link) out of" in refusal(
        {"file": path}, cluster_scope(files_dir=str(files_dir))
    )


def test_the_operators_directory_may_itself_be_a_link(files_dir: Path, tmp_path: Path) -> None:
    alias = tmp_path / "run-secrets"
    alias.symlink_to(files_dir)
    scope = cluster_scope(files_dir=str(alias))
    assert read_secret(source({"file": f"{alias}/tenant-a/api"}), scope) == VALUE
    assert "is not under" in refusal({"file": f"{files_dir}/tenant-a/api"}, scope)


def test_file_refusal_is_decided_by_the_name_alone() -> None:
    assert file_refusal("/s/tenant-a/x", "/s", "tenant-a") is None
    assert file_refusal("/s//tenant-a/./x", "/s/", "tenant-a") is None
    assert file_refusal("/s/tenant-a/x", None, "tenant-a") is not None
    assert file_refusal("/s/tenant-a-x", "/s", "tenant-a") is not None


def test_a_fifo_a_directory_or_a_large_file_is_refused_without_blocking(tmp_path: Path) -> None:
    own = tmp_path / "tenant-a"
    own.mkdir()
    os.mkfifo(own / "fifo")
    (own / "dir").mkdir()
    (own / "big").write_bytes(b"x" * (MAX_SECRET_BYTES + 1))
    scope = cluster_scope(files_dir=str(tmp_path))
    assert "is not a regular file" in refusal({"file": str(own / "fifo")}, scope)
    assert "is not a regular file" in refusal({"file": str(own / "dir")}, scope)
    assert f"is larger than {MAX_SECRET_BYTES} bytes" in refusal({"file": str(own / "big")}, scope)
    assert "is not a regular file" in refusal({"file": str(own / "fifo")}, SecretScope())


# --- Secrets in another namespace ------------------------------------------------------------


def grant(to: dict, namespace: str = "shared", from_namespace: str = "tenant-a") -> Entry:
    document = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "g", "namespace": namespace},
        "spec": {
            "from": [
                {
                    "group": "mcp-oauth-gateway.dev",
                    "kind": "GatewayPolicy",
                    "namespace": from_namespace,
                }
            ],
            "to": [to],
        },
    }
    return Entry(ReferenceGrant.model_validate(document))


SHARED = {"secretRef": {"name": "keys", "key": "api", "namespace": "shared"}}
STORED = secrets({("shared", "keys"): {"api": VALUE.encode()}})


@pytest.mark.parametrize(
    "grants",
    [
        {},
        {"g": grant({"group": "", "kind": "Service"})},
        {"g": grant({"group": "", "kind": "Secret", "name": "other"})},
        {"g": grant({"group": "", "kind": "Secret"}, from_namespace="tenant-b")},
        {"g": grant({"group": "", "kind": "Secret"}, namespace="tenant-b")},
        {"g": grant({"group": "gateway.networking.k8s.io", "kind": "Secret"})},
    ],
    ids=["none", "for-services", "for-another-name", "for-another-tenant", "elsewhere", "group"],
)
def test_a_secret_of_another_namespace_needs_a_grant_there(grants: dict) -> None:
    message = refusal(SHARED, cluster_scope(read=STORED, grants=grants))
    assert message == (
        "secretRef: Secret shared/keys is in another namespace: it needs a ReferenceGrant in "
        "namespace shared from GatewayPolicy (mcp-oauth-gateway.dev) in namespace tenant-a to "
        "Secret keys"
    )
    # Whether it exists is not said: the same words when it does not.
    absent = cluster_scope(read=secrets({}, "shared"), grants=grants)
    assert refusal(SHARED, absent) == message


@pytest.mark.parametrize(
    "to", [{"group": "", "kind": "Secret"}, {"group": "", "kind": "Secret", "name": "keys"}]
)
def test_a_grant_for_secrets_or_for_this_one_permits_it(to: dict) -> None:
    scope = cluster_scope(read=STORED, grants={"g": grant(to)})
    assert read_secret(source(SHARED), scope) == VALUE


def test_the_controller_reads_only_what_a_policy_may_use() -> None:
    def policy(namespace: str, *refs: dict) -> GatewayPolicy:
        header = [
            {"name": f"t{i}", "secretHeader": {"header": "X-K", "value": r}}
            for i, r in enumerate(refs)
        ]
        document = {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayPolicy",
            "metadata": {"name": "p", "namespace": namespace},
            "spec": {
                "targetRefs": [{"kind": "HTTPRoute", "name": "r"}],
                "traffic": {
                    "jwtAuthentication": {
                        "providers": [{"issuer": "https://i/", "jwks": {"inline": "{}"}}]
                    }
                },
                "backend": {"credentials": {"targets": header}},
            },
        }
        return GatewayPolicy.model_validate(document)

    policies = [
        policy(
            "tenant-a",
            REF,
            SHARED,
            {"secretRef": {"name": "x", "key": "k", "namespace": "tenant-b"}},
        ),
        policy("tenant-c", {"env": "TENANT_B_KEY"}, {"file": "/etc/passwd"}),
    ]
    assert wanted_secrets(policies, {}) == {"tenant-a": frozenset({"keys"})}
    granted = {"g": grant({"group": "", "kind": "Secret", "name": "keys"})}
    assert wanted_secrets(policies, granted) == {
        "tenant-a": frozenset({"keys"}),
        "shared": frozenset({"keys"}),
    }


# --- what cannot be used, and what it says ---------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (
            None,
            "secretRef: Secret tenant-a/keys not found; create it with the key api "
            "(kubectl create secret generic keys -n tenant-a --from-file=api=PATH)",
        ),
        (
            {"other": b"x", "more": b"y"},
            "secretRef: Secret tenant-a/keys has no key api (its keys: more, other)",
        ),
        ({"api": b""}, "secretRef: Secret tenant-a/keys key api is empty"),
        ({"api": b"\n"}, "secretRef: Secret tenant-a/keys key api is empty"),
        ({"api": b"line-1\nline-2"}, "key api holds control characters; a secret must be one line"),
        ({"api": b"k\x00ey"}, "key api holds control characters; a secret must be one line"),
        ({"api": b"\xff\xfe"}, "secretRef: Secret tenant-a/keys key api is not UTF-8 text"),
        (
            {"api": b"k" * (MAX_SECRET_BYTES + 1)},
            f"key api is larger than {MAX_SECRET_BYTES} bytes",
        ),
    ],
    ids=["missing", "no-key", "empty", "only-a-newline", "two-lines", "nul", "binary", "large"],
)
def test_a_secret_that_cannot_be_used_is_named_with_the_fix(stored, expected) -> None:
    data = {} if stored is None else {("tenant-a", "keys"): stored}
    message = refusal(REF, cluster_scope(read=secrets(data, "tenant-a")))
    assert expected in message


def test_an_unreadable_or_unread_namespace_fails_closed() -> None:
    why = "the gateway's controller may not read Secrets in namespace tenant-a (forbidden); ..."
    unreadable = ClusterSecrets(unreadable=MappingProxyType({"tenant-a": why}))
    assert refusal(REF, cluster_scope(read=unreadable)) == f"secretRef: {why}"
    assert refusal(REF, cluster_scope()) == (
        "secretRef: Secret tenant-a/keys has not been read from the API server yet"
    )


# --- built as the controller builds --------------------------------------------------------

OBJECTS = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: mcp}
spec: {controllerName: mcp-oauth-gateway.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: tenant-a}
spec:
  gatewayClassName: mcp
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mcp, namespace: tenant-a}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: be}]}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {name: be, namespace: tenant-a}
spec: {mcp: {targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {name: auth, namespace: tenant-a}
spec:
  targetRefs: [{kind: HTTPRoute, name: mcp}]
  traffic:
    jwtAuthentication:
      providers: [{issuer: "https://idp.example/", jwks: {inline: 'JWKS'}}]
  backend:
    credentials:
      secretHeader:
        header: X-Api-Key
        value: SOURCE
"""


def build(source_yaml: str, read: ClusterSecrets):
    objects = [
        KINDS[d["apiVersion"], d["kind"]].model_validate(d)
        for d in yaml.safe_load_all(OBJECTS.replace("SOURCE", source_yaml).replace("JWKS", JWKS))
    ]
    cluster = Cluster(secrets=read)
    return build_from_objects(objects, at="T", deployment=Deployment(cluster=cluster))


def test_a_policy_reading_its_secret_is_served_with_it_and_never_shows_it() -> None:
    read = secrets({("tenant-a", "keys"): {"api": VALUE.encode()}})
    result = build("{secretRef: {name: keys, key: api}}", read)
    (report,) = result.snapshot.policies
    assert report.ok, report.conditions
    (route,) = result.snapshot.listeners[8080]
    assert route.policy is not None
    assert route.policy.credentials is not None
    header = route.policy.credentials.secret_header
    assert header is not None
    assert header.value == VALUE.encode()
    for text in (repr(result), repr(read), repr(Cluster(secrets=read))):
        assert VALUE not in text


@pytest.mark.parametrize(
    "source_yaml",
    [
        "{env: TENANT_B_KEY}",
        "{file: /var/run/secrets/kubernetes.io/serviceaccount/token}",
        "{secretRef: {name: keys, key: api, namespace: tenant-b}}",
        "{secretRef: {name: absent, key: api}}",
    ],
)
def test_a_policy_whose_secret_may_not_be_read_is_not_accepted_and_fails_closed(
    source_yaml: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANT_B_KEY", "b-key")
    read = secrets({("tenant-b", "keys"): {"api": b"b-key"}}, "tenant-a")
    result = build(source_yaml, read)
    (report,) = result.snapshot.policies
    accepted = report.conditions[0]
    assert (accepted.type, accepted.status, accepted.reason) == ("Accepted", False, "Invalid")
    assert accepted.message.startswith("spec.backend.credentials.secretHeader.value: ")
    assert "b-key" not in accepted.message
    (route,) = result.snapshot.listeners[8080]
    assert route.policy is not None
    assert route.policy.invalid is not None


async def test_no_value_of_a_secret_ref_reaches_an_admin_answer() -> None:
    read = secrets({("tenant-a", "keys"): {"api": VALUE.encode()}})
    snapshot = build("{secretRef: {name: keys, key: api}}", read).snapshot
    app = GatewayApp(ControlPlane(snapshot), ServeOptions(status_port=9901))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:9901"
    ) as client:
        answers = [(await client.get(p)).text for p in ("/config", "/status", "/readyz")]
    assert "x-api-key" in answers[0]  # the credential is there, its value is not
    for text in [json.dumps(config_dump(snapshot)), *answers]:
        assert VALUE not in text
