"""`DevApiServer`: a real Kubernetes API server (kube-apiserver + etcd), driven through the tool.

`tools/dev_cluster.py` builds (once, cached), starts, restarts and stops the server; this class
runs it and talks to the server over HTTPS with the admin's client certificate the tool issued
(`cluster.DevCluster` adds kubectl and Helm). The gateway's own code talks to Kubernetes through
kubernetes_asyncio, never through this helper.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "dev_cluster.py"
CRDS = Path(__file__).resolve().parent / "crds"
CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# How long a call keeps retrying 429 "storage is (re)initializing": after a (re)start the server
# builds each custom resource's watch cache on first use and answers 429 until it is ready.
RETRY_SECONDS = 10.0


class DevApiServerError(Exception):
    """The tool failed; the message is its own one-line explanation (step and fix)."""


def _run_tool(*args: str, echo: bool = False, tool: Path = TOOL) -> str:
    """Run the tool; with `echo`, its progress lines reach the caller's stderr as they come."""
    proc = subprocess.Popen(
        [sys.executable, str(tool), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if echo:
            print(line, end="", file=sys.stderr, flush=True)
    if proc.wait() != 0:
        prefix = f"{tool.stem.replace('_', '-')}: error: "
        errors = [line for line in lines if line.startswith(prefix)]
        detail = errors[-1].removeprefix(prefix) if errors else "\n".join(lines[-15:])
        raise DevApiServerError(f"{tool.name} {args[0]} failed: {detail}")
    return "\n".join(lines)


class DevApiServer:
    """One running server: etcd plus kube-apiserver on free loopback ports."""

    tool = TOOL

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.state: dict[str, Any] = {}
        self._reload()

    @classmethod
    def build(cls, *, echo: bool = False) -> None:
        """Build once into the cache (minutes the first time, instant afterwards)."""
        _run_tool("build", "--quiet", echo=echo, tool=cls.tool)

    @classmethod
    def cached_binary(cls, name: str) -> Path:
        """A cached binary (kube-apiserver, kubectl, etcd, helm), built first if needed."""
        cls.build(echo=True)
        return Path(_run_tool("path", name, tool=cls.tool).splitlines()[-1])

    @classmethod
    def start(cls, directory: Path, *, any_namespace: bool = False) -> Self:
        """Start a server in `directory`; it is stopped also if this process dies first.
        `any_namespace`: objects may name namespaces never created (NamespaceLifecycle off)."""
        extra = ["--any-namespace"] if any_namespace else []
        args = ["start", "--dir", str(directory), "--watch-pid", str(os.getpid()), *extra]
        _run_tool(*args, tool=cls.tool)
        return cls(directory)

    def _reload(self) -> None:
        self.state = json.loads((self.directory / "state.json").read_text())

    @property
    def base_url(self) -> str:
        return str(self.state["server"])

    @property
    def port(self) -> int:
        return int(self.state["apiserver"]["port"])

    @property
    def kubeconfig(self) -> Path:
        return Path(self.state["kubeconfig"])

    @property
    def ca(self) -> Path:
        return Path(self.state["ca"])

    @property
    def client_cert(self) -> tuple[Path, Path]:
        """(certificate, key) of the `system:masters` client."""
        return Path(self.state["client_cert"]), Path(self.state["client_key"])

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(*(str(path) for path in self.client_cert))
        return context

    def client(self, timeout: float = 10.0) -> httpx.Client:
        # trust_env=False: a proxy setting in the environment must not capture 127.0.0.1.
        return httpx.Client(
            base_url=self.base_url, verify=self.ssl_context(), timeout=timeout, trust_env=False
        )

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        """One call (retried on 429, as client-go does); `body` goes as JSON unless `content`."""
        if body is not None:
            kwargs["json"] = body
        with self.client() as client:
            return _retrying_429(lambda: client.request(method, path, **kwargs))

    def apply_crds(self, paths: Iterable[Path], timeout: float = 30.0) -> None:
        """Create (or replace) each CRD, then wait until every one is Established and served."""
        crds = [yaml.safe_load(path.read_text()) for path in paths]
        with self.client() as client:
            for crd in crds:
                self._create_or_replace(client, crd)
            for crd in crds:
                self._wait_served(client, crd, time.monotonic() + timeout)

    @staticmethod
    def _create_or_replace(client: httpx.Client, crd: dict[str, Any]) -> None:
        created = client.post(CRD_API, json=crd)
        if created.status_code == 409:
            current = client.get(f"{CRD_API}/{crd['metadata']['name']}").raise_for_status()
            crd = {**crd, "metadata": {**crd["metadata"], **_version_of(current.json())}}
            client.put(f"{CRD_API}/{crd['metadata']['name']}", json=crd).raise_for_status()
        elif created.status_code != 201:
            raise DevApiServerError(
                f"creating CRD {crd['metadata']['name']}: {created.status_code} {created.text}"
            )

    @staticmethod
    def _wait_served(client: httpx.Client, crd: dict[str, Any], deadline: float) -> None:
        name, spec = crd["metadata"]["name"], crd["spec"]
        # Established is the server's word that the CRD is served; a list on every served
        # version confirms the handlers answer, so tests never race them.
        paths = [
            f"/apis/{spec['group']}/{version['name']}/{spec['names']['plural']}"
            for version in spec["versions"]
            if version.get("served")
        ]
        while True:
            got = client.get(f"{CRD_API}/{name}").raise_for_status().json()
            if established(got) and all(client.get(p).status_code == 200 for p in paths):
                return
            if time.monotonic() > deadline:
                conditions = got.get("status", {}).get("conditions")
                raise DevApiServerError(f"CRD {name} not served in time; conditions {conditions}")
            time.sleep(0.1)

    @contextlib.contextmanager
    def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 20
    ) -> Iterator[Iterator[dict[str, Any]]]:
        """Watch `path` from `resource_version`; yields an iterator of watch events.

        The watch is registered when this returns (the server has answered with its headers),
        so changes made inside the `with` block are seen. The server ends the watch after
        `timeout_seconds`, so a missing event ends the loop instead of hanging the test.
        """
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        with self.client(timeout=timeout_seconds + 10) as client:
            request = client.build_request("GET", path, params=params)
            response = _retrying_429(lambda: client.send(request, stream=True))
            try:
                response.raise_for_status()
                yield (json.loads(line) for line in response.iter_lines() if line)
            finally:
                response.close()

    def restart(self) -> None:
        """Restart the API server only: same port, same etcd, so the data survives."""
        _run_tool("restart", "--dir", str(self.directory), tool=self.tool)
        self._reload()

    def stop(self) -> None:
        _run_tool("stop", "--dir", str(self.directory), tool=self.tool)


def _retrying_429(send: Callable[[], httpx.Response]) -> httpx.Response:
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        response = send()
        if response.status_code != 429 or time.monotonic() > deadline:
            return response
        response.close()
        # Retry-After says 1 s; the cache is usually ready within a few hundred milliseconds.
        time.sleep(0.1)


def _version_of(obj: dict[str, Any]) -> dict[str, Any]:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}


def established(crd: dict[str, Any]) -> bool:
    """Whether a CRD object reports the Established condition as True."""
    conditions = crd.get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
