"""A target's TLS, decided at load: the CA file read where the mode allows (any file from
resource files, in a cluster only under `--secret-files-dir`/<namespace>/), its certificates
checked, the context made once and never without verification; a file that holds no
certificate refuses the backend, its routes answer 503 and the load reports the field."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import yaml

from mcp_oauth_gateway.controller_name import CONTROLLER_NAME
from mcp_oauth_gateway.controlplane import Deployment, build_from_objects
from mcp_oauth_gateway.controlplane.backend_tls import (
    MAX_CA_BYTES,
    TlsConfigError,
    client_context,
    compile_tls,
)
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.egress import EgressRules
from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget
from mcp_oauth_gateway.resources.models import KINDS, BackendTls
from tls_support import TestCa

AT = "2026-01-01T00:00:00Z"
FIELD = "spec.mcp.targets[0].static.tls.caFile"


@pytest.fixture(scope="module")
def ca() -> TestCa:
    return TestCa("compile test CA")


def test_the_server_name_is_the_host_unless_given(ca, tmp_path):
    path = ca.write(tmp_path / "ca.pem")
    plain = compile_tls(BackendTls(), "mcp.example.com", "default", None)
    assert (plain.server_name, plain.ca_pem) == ("mcp.example.com", None)
    named = compile_tls(
        BackendTls(ca_file=str(path), server_name="mcp.internal"), "10.0.0.7", "default", None
    )
    assert (named.server_name, named.ca_pem) == ("mcp.internal", ca.pem)


def test_every_context_verifies_the_certificate_and_the_name_over_tls_12_or_later(ca):
    for context in (client_context(None), client_context(ca.pem)):
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname
        assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    # Only the file's CAs: a context for them trusts none of the system's.
    assert [c["subject"] for c in client_context(ca.pem).get_ca_certs()] == [
        ((("commonName", "compile test CA"),),)
    ]


def test_the_same_certificates_are_the_same_trust_and_one_context(ca, tmp_path):
    """Explanatory text and spacing around the PEM do not make another target (a reload that
    changes neither keeps a federated route's sessions); other CAs do."""
    bare = ca.write(tmp_path / "bare.pem")
    noted = tmp_path / "noted.pem"
    noted.write_bytes(b"Our CA, r\xc3\xa9issued\n\n" + ca.pem + b"\n\n")
    first = compile_tls(BackendTls(ca_file=str(bare)), "h", "default", None)
    second = compile_tls(BackendTls(ca_file=str(noted)), "h", "default", None)
    assert first == second
    assert hash(first) == hash(second)
    assert first.context is second.context
    other = compile_tls(
        BackendTls(ca_file=str(TestCa("other").write(tmp_path / "o.pem"))), "h", "default", None
    )
    assert other != first
    assert CompiledTarget("h", 443, "/mcp", "t", None, first) != CompiledTarget(
        "h", 443, "/mcp", "t", None, other
    )
    assert CompiledTarget("h", 443, "/mcp", "t", None, first) != CompiledTarget(
        "h", 443, "/mcp", "t"
    )


def test_the_targets_url_says_https_when_it_speaks_tls(ca):
    tls = compile_tls(BackendTls(), "fd00::1", "default", None)
    assert CompiledTarget("fd00::1", 8443, "/mcp", tls=tls).url == "https://[fd00::1]:8443/mcp"
    assert CompiledTarget("mcp", 8000, "/x").url == "http://mcp:8000/x"
    # The Host header of a hosted https server is its name alone, as clients send it.
    hosted = CompiledTarget("api.githubcopilot.com", 443, "/mcp/", tls=tls)
    assert (hosted.authority, hosted.url) == (
        "api.githubcopilot.com",
        "https://api.githubcopilot.com/mcp/",
    )
    assert CompiledTarget("mcp", 443, "/x").authority == "mcp:443"  # plain HTTP to 443


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not a certificate\n", "holds no readable PEM certificate"),
        (b"", "holds no readable PEM certificate"),
        (b"-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n", "no readable PEM"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "no readable PEM"),
        (b"\x30\x82\x01\x0a" * 64, "holds no readable PEM certificate"),  # DER, not PEM
        (b"A" * (MAX_CA_BYTES + 1), f"is larger than {MAX_CA_BYTES} bytes"),
    ],
    ids=["text", "empty", "key", "broken", "der", "huge"],
)
def test_a_file_without_a_readable_certificate_is_refused(tmp_path, content, why):
    path = tmp_path / "ca.pem"
    path.write_bytes(content)
    with pytest.raises(TlsConfigError, match=why):
        compile_tls(BackendTls(ca_file=str(path)), "h", "default", None)


def test_a_file_that_cannot_be_read_is_refused(tmp_path):
    with pytest.raises(TlsConfigError, match="cannot be read"):
        compile_tls(BackendTls(ca_file=str(tmp_path / "missing.pem")), "h", "default", None)
    with pytest.raises(TlsConfigError, match="is not a regular file"):
        compile_tls(BackendTls(ca_file=str(tmp_path)), "h", "default", None)


def in_cluster(files_dir: Path | None) -> Cluster:
    return Cluster(secret_files_dir=None if files_dir is None else str(files_dir))


def test_in_a_cluster_a_ca_file_is_read_only_under_the_namespaces_directory(ca, tmp_path):
    files = tmp_path / "files"
    (files / "team-a").mkdir(parents=True)
    (files / "team-b").mkdir()
    own = ca.write(files / "team-a" / "ca.pem")
    theirs = ca.write(files / "team-b" / "ca.pem")
    (files / "team-a" / "link.pem").symlink_to(theirs)
    tls = compile_tls(BackendTls(ca_file=str(own)), "h", "team-a", in_cluster(files))
    assert tls.ca_pem == ca.pem
    refusals = {
        "no files dir": (own, None, "reads no file of the gateway's pod"),
        "another namespace": (theirs, files, f"is not under {files}/team-a/"),
        "dot-dot": (Path(f"{files}/team-a/../team-b/ca.pem"), files, "contains '..'"),
        "link out": (files / "team-a" / "link.pem", files, "leads (through a symbolic link)"),
    }
    for name, (path, files_dir, why) in refusals.items():
        with pytest.raises(TlsConfigError) as refused:
            compile_tls(BackendTls(ca_file=str(path)), "h", "team-a", in_cluster(files_dir))
        message = str(refused.value)
        assert why in message, (name, message)
        assert "secretRef" not in message, (name, message)  # a policy's fix, not a backend's


RESOURCES = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: mcp}}
spec: {{controllerName: {controller}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: mcp
  listeners: [{{name: http, port: 8080, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend, namespace: default}}
spec:
  mcp:
    targets: [{{name: t, {address}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: github, namespace: default}}
spec: {{type: ExternalName, externalName: api.githubcopilot.com, ports: [{{port: 443}}]}}
"""


def build(address: str, cluster: Cluster | None = None):
    text = RESOURCES.format(controller=CONTROLLER_NAME, address=address)
    objects = [
        KINDS[d["apiVersion"], d["kind"]].model_validate(d) for d in yaml.safe_load_all(text)
    ]
    return build_from_objects(objects, at=AT, deployment=Deployment(cluster=cluster))


def test_a_ca_file_without_a_certificate_refuses_the_backend_at_load(tmp_path):
    path = tmp_path / "ca.pem"
    path.write_text("not a certificate\n")
    result = build(f"static: {{host: 127.0.0.1, port: 8443, tls: {{caFile: {path}}}}}")
    (route,) = result.snapshot.listeners[8080]
    assert route.target is None
    assert route.broken is not None
    assert FIELD in route.broken
    assert any(FIELD in e and "no readable PEM certificate" in e for e in result.snapshot.errors)
    status = result.statuses["GatewayBackend", "default", "backend"]
    (accepted,) = status.conditions
    assert (accepted.status, FIELD in accepted.message) == (False, True)


def test_static_and_service_targets_compile_to_https(ca, tmp_path):
    path = ca.write(tmp_path / "ca.pem")
    static = build(f"static: {{host: 127.0.0.1, port: 8443, tls: {{caFile: {path}}}}}")
    (route,) = static.snapshot.listeners[8080]
    assert route.target is not None
    assert route.target.tls is not None
    assert route.target.url == "https://127.0.0.1:8443/mcp"
    assert (route.target.tls.server_name, route.target.tls.ca_pem) == ("127.0.0.1", ca.pem)
    status = static.statuses["GatewayBackend", "default", "backend"]
    assert status.conditions[0].message == "Target https://127.0.0.1:8443/mcp"
    # An ExternalName Service (how a cluster names a hosted server): its name, the system's CAs.
    service = build("service: {name: github, port: 443, path: /, tls: {}}")
    (route,) = service.snapshot.listeners[8080]
    assert route.target is not None
    assert route.target.tls is not None
    assert route.target.url == "https://api.githubcopilot.com/"
    assert (route.target.tls.server_name, route.target.tls.ca_pem) == (
        "api.githubcopilot.com",
        None,
    )


def test_in_a_cluster_a_ca_file_outside_the_namespaces_directory_refuses_the_backend(ca, tmp_path):
    path = ca.write(tmp_path / "ca.pem")
    cluster = Cluster(egress=EgressRules.of(("127.0.0.0/8",)), secret_files_dir=str(tmp_path / "f"))
    result = build(f"static: {{host: 127.0.0.1, port: 8443, tls: {{caFile: {path}}}}}", cluster)
    (route,) = result.snapshot.listeners[8080]
    assert route.target is None
    assert route.broken is not None
    assert f"{FIELD}: {path} is not under {tmp_path}/f/default/" in route.broken
