"""One dev API server's directory: where its files live, its certificates and its kubeconfig."""

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
    kubeconfig: Path
    state: Path
    etcd_data: Path
    etcd_log: Path
    apiserver_log: Path
    watchdog_log: Path
    cert_dir: Path

    @classmethod
    def of(cls, directory: Path) -> Paths:
        root = directory.expanduser().resolve()
        names = (
            *("ca.crt", "server.crt", "server.key", "client.crt", "client.key", "kubeconfig"),
            *("state.json", "etcd", "etcd.log", "apiserver.log", "watchdog.log", "certs"),
        )
        return cls(root, *(root / name for name in names))


def tls(paths: Paths) -> _devcerts.Tls:
    """The server's certificate files, as `_devcerts.write_tls` writes them."""
    return _devcerts.Tls(
        paths.ca, paths.server_cert, paths.server_key, paths.client_cert, paths.client_key
    )


def write_kubeconfig(paths: Paths, port: int) -> None:
    """The admin's kubeconfig (client certificate) for the server on `port`."""

    # JSON strings are YAML strings: paths with spaces or colons stay intact.
    def q(value: object) -> str:
        return json.dumps(str(value))

    paths.kubeconfig.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        "- name: dev-apiserver\n"
        "  cluster:\n"
        f"    server: {q(f'https://127.0.0.1:{port}')}\n"
        f"    certificate-authority: {q(paths.ca)}\n"
        "users:\n"
        "- name: dev-admin\n"
        "  user:\n"
        f"    client-certificate: {q(paths.client_cert)}\n"
        f"    client-key: {q(paths.client_key)}\n"
        "contexts:\n"
        "- name: dev-apiserver\n"
        "  context:\n"
        "    cluster: dev-apiserver\n"
        "    user: dev-admin\n"
        "current-context: dev-apiserver\n"
    )
