"""One dev cluster's directory: where its files live, its keys and certificates, its kubeconfigs
and the audit policy that logs what ServiceAccounts ask for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import _devcerts


@dataclass(frozen=True)
class Paths:
    """Where one server's files live in its directory."""

    root: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    sa_key: Path
    sa_pub: Path
    kubeconfig: Path
    state: Path
    etcd_data: Path
    etcd_log: Path
    apiserver_log: Path
    audit_log: Path
    audit_policy: Path
    watchdog_log: Path
    cert_dir: Path

    @classmethod
    def of(cls, directory: Path) -> Paths:
        root = directory.expanduser().resolve()
        names = (
            *("ca.crt", "server.crt", "server.key", "admin.crt", "admin.key"),
            *("service-accounts.key", "service-accounts.pub", "kubeconfig", "state.json"),
            *("etcd", "etcd.log", "apiserver.log", "audit.log", "audit-policy.yaml"),
            *("watchdog.log", "certs"),
        )
        return cls(root, *(root / name for name in names))

    def tls(self) -> _devcerts.Tls:
        """The server's certificate files, as `_devcerts.write_tls` writes them."""
        return _devcerts.Tls(
            self.ca, self.server_cert, self.server_key, self.client_cert, self.client_key
        )


def write_keys(paths: Paths) -> None:
    """The server's TLS (`_devcerts`), plus the key that signs ServiceAccount tokens."""
    _devcerts.write_tls(paths.tls(), "mcp-oauth-gateway dev-cluster CA")
    if paths.sa_key.is_file() and paths.sa_pub.is_file():
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    _devcerts.write_pem(paths.sa_key, key)
    paths.sa_pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def kubeconfig_text(server: str, ca: Path, user: str, credentials: dict[str, str]) -> str:
    """A kubeconfig with one cluster, one user (`credentials`: client-certificate/client-key,
    or token) and one context (JSON strings are YAML strings: paths keep spaces and colons)."""

    def q(value: object) -> str:
        return json.dumps(str(value))

    lines = [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: dev-cluster",
        "  cluster:",
        f"    server: {q(server)}",
        f"    certificate-authority: {q(ca)}",
        "users:",
        f"- name: {q(user)}",
        "  user:",
        *(f"    {key}: {q(value)}" for key, value in credentials.items()),
        "contexts:",
        "- name: dev-cluster",
        "  context:",
        "    cluster: dev-cluster",
        f"    user: {q(user)}",
        "current-context: dev-cluster",
    ]
    return "\n".join(lines) + "\n"


def write_admin_kubeconfig(paths: Paths, port: int) -> None:
    """The admin's kubeconfig (client certificate, system:masters) for the server on `port`."""
    credentials = {
        "client-certificate": str(paths.client_cert),
        "client-key": str(paths.client_key),
    }
    paths.kubeconfig.write_text(
        kubeconfig_text(f"https://127.0.0.1:{port}", paths.ca, "dev-admin", credentials)
    )
    paths.kubeconfig.chmod(0o600)


def write_audit_policy(paths: Paths) -> None:
    """The audit policy: Metadata for every ServiceAccount's request, nothing else."""
    # ServiceAccounts only: the admin's own calls (tests, kubectl) stay out of the log.
    paths.audit_policy.write_text(
        "apiVersion: audit.k8s.io/v1\n"
        "kind: Policy\n"
        "omitStages: [RequestReceived]\n"
        "rules:\n"
        "  - level: Metadata\n"
        "    userGroups: [system:serviceaccounts]\n"
        "  - level: None\n"
    )
