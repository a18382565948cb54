"""`DevCluster`: a full Kubernetes API server (kube-apiserver + etcd) with kubectl and Helm.

`tools/dev_cluster.py` builds them from the Go module proxy (once, cached), starts, restarts and
stops the server; this class runs the tool and the cached `kubectl` and `helm` against it, as a
person would from a shell. Its HTTPS helpers (`request`, `apply_crds`, `watch`) are
`DevApiServer`'s, with the admin's (`system:masters`) client certificate.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

# TOOL stays importable from here: tests run the tool by its path.
from .apiserver import TOOL as TOOL
from .apiserver import DevApiServer

# What a first build adds to a run (2 cores), for messages: tools/dev_cluster.py says more.
FIRST_BUILD = "~7 minutes and ~6 GB of disk the first time, then cached"


class DevCluster(DevApiServer):
    """One running kube-apiserver (RBAC on, ServiceAccount tokens, audit log) with its etcd."""

    def binary(self, name: str) -> Path:
        """The cached binary `name`: kube-apiserver, kubectl, etcd or helm."""
        return Path(self.state["binaries"][name])

    @property
    def audit_log(self) -> Path:
        return Path(self.state["audit_log"])

    def _env(self) -> dict[str, str]:
        # Only this server: no KUBECONFIG or HELM_* of the caller's, and caches in its directory.
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "KUBECONFIG" and not k.startswith(("HELM_", "KUBECTL_"))
        }
        helm = self.directory / "helm"
        env.update(
            HELM_CACHE_HOME=str(helm / "cache"),
            HELM_CONFIG_HOME=str(helm / "config"),
            HELM_DATA_HOME=str(helm / "data"),
        )
        return env

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl ARGS` as the admin (or with `kubeconfig`); a failure with `check` raises an
        AssertionError that shows the command and what it printed."""
        command = [
            str(self.binary("kubectl")),
            *("--kubeconfig", str(kubeconfig or self.kubeconfig)),
            *("--cache-dir", str(self.directory / "kube-cache")),
            *args,
        ]
        return self._run(command, args, stdin, check, timeout)

    def helm(
        self, *args: str, kubeconfig: Path | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """`helm ARGS` against this server (its cache and configuration in the server's
        directory)."""
        command = [
            str(self.binary("helm")),
            *("--kubeconfig", str(kubeconfig or self.kubeconfig)),
            *args,
        ]
        return self._run(command, args, None, check, timeout)

    def _run(
        self,
        command: list[str],
        args: tuple[str, ...],
        stdin: str | None,
        check: bool,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self._env(),
            check=False,
        )
        if check and result.returncode != 0:
            shown = " ".join([Path(command[0]).name, *args])
            raise AssertionError(
                f"`{shown}` exited {result.returncode}\nstdout:\n{result.stdout}\n"
                f"stderr:\n{result.stderr}"
            )
        return result

    def token_kubeconfig(self, token: str, user: str, path: Path) -> Path:
        """A kubeconfig for this server holding only `token` (no client certificate, so RBAC
        judges every call made with it)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "dev-cluster",
                    "cluster": {"server": self.base_url, "certificate-authority": str(self.ca)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {"name": "dev-cluster", "context": {"cluster": "dev-cluster", "user": user}}
            ],
            "current-context": "dev-cluster",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def audit_events(self, username: str) -> list[dict[str, Any]]:
        """Every request of `username` (a ServiceAccount) the server has answered so far."""
        if not self.audit_log.exists():
            return []
        events = []
        for line in self.audit_log.read_text().splitlines():
            event = json.loads(line)
            if event.get("user", {}).get("username") == username:
                events.append(event)
        return events
