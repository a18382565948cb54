"""The build behind `dev_cluster.py build`: kube-apiserver, kubectl, etcd and Helm compiled from
the Go module proxy (the recipes below; `_gobuild.py` says how), cached once.

The cache keeps the four binaries and `versions.json`, which records each binary's version
after its recipe is built; `missing` and `tool_path` read it without starting any process.
"""

from __future__ import annotations

import datetime
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _devserver as common
import _gobuild
from _devserver import ToolError, elapsed, say
from _gobuild import Recipe

KUBERNETES_VERSION = "v1.36.4"
# What k8s.io/kubernetes v1.36.4's go.mod requires of go.etcd.io/etcd/server/v3.
ETCD_VERSION = "v3.6.8"
HELM_VERSION = "v4.3.1"
APISERVER = "kube-apiserver"
KUBECTL = "kubectl"
ETCD = "etcd"
HELM = "helm"
BINARIES = (APISERVER, KUBECTL, ETCD, HELM)
# Measured at the peak of a first build: ~1.4 GB of modules, ~3.6 GB of Go build cache, the
# binaries; a margin on top.
FREE_SPACE_NEEDED = 7 * 1024**3


def _kubernetes_ldflags(version: str) -> str:
    major, minor = version.removeprefix("v").split(".")[:2]
    flags = ["-s", "-w"]
    # What the upstream release stamps (hack/lib/version.sh): `kubectl version` and /version.
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return " ".join(flags)


RECIPES = (
    Recipe(
        name="kubernetes",
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        binaries={
            APISERVER: "k8s.io/kubernetes/cmd/kube-apiserver",
            KUBECTL: "k8s.io/kubernetes/cmd/kubectl",
        },
        checks={
            APISERVER: (["--version"], f"Kubernetes {KUBERNETES_VERSION}"),
            KUBECTL: (["version", "--client"], f"Client Version: {KUBERNETES_VERSION}"),
        },
        ldflags=_kubernetes_ldflags(KUBERNETES_VERSION),
        staging=True,
        minutes={APISERVER: "~5 minutes", KUBECTL: "~25 seconds"},
    ),
    Recipe(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=ETCD_VERSION,
        binaries={ETCD: "go.etcd.io/etcd/server/v3"},
        checks={ETCD: (["--version"], f"etcd Version: {ETCD_VERSION.removeprefix('v')}")},
        minutes={ETCD: "~30 seconds"},
    ),
    Recipe(
        name="helm",
        module="helm.sh/helm/v4",
        version=HELM_VERSION,
        binaries={HELM: "helm.sh/helm/v4/cmd/helm"},
        checks={HELM: (["version", "--template", "{{.Version}}"], HELM_VERSION)},
        ldflags=(
            f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION} "
            "-X helm.sh/helm/v4/internal/version.gitTreeState=clean"
        ),
        minutes={HELM: "~2 minutes"},
    ),
)
WANTED = {binary: recipe.version for recipe in RECIPES for binary in recipe.binaries}


def cache_dir() -> Path:
    """The build cache: $MCP_OAUTH_GATEWAY_CLUSTER_CACHE, else under $XDG_CACHE_HOME."""
    explicit = os.environ.get("MCP_OAUTH_GATEWAY_CLUSTER_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcp-oauth-gateway" / f"cluster-{KUBERNETES_VERSION}"


def missing(cache: Path, marker: dict[str, Any]) -> list[Recipe]:
    """The recipes with a binary not cached at the wanted version (cheap: no process runs)."""
    return [
        recipe
        for recipe in RECIPES
        if any(
            marker.get(binary) != recipe.version or not os.access(cache / "bin" / binary, os.X_OK)
            for binary in recipe.binaries
        )
    ]


def build(cache: Path) -> dict[str, Any]:
    """Build what is not cached yet; a later call with everything cached returns at once.

    Only the recipes whose version changed (or whose binary is gone) are built again.
    """
    marker = common.read_marker(cache)
    if not missing(cache, marker):
        return marker
    with common.build_lock(cache):
        marker = common.read_marker(cache)
        todo = missing(cache, marker)
        if not todo:
            return marker
        started = time.monotonic()
        _preflight(cache)
        work = cache / "work"
        steps = len(todo) + 1
        chain = _gobuild.toolchain(work, f"step 1/{steps}")
        out = work / "out"
        out.mkdir(parents=True, exist_ok=True)
        (cache / "bin").mkdir(exist_ok=True)
        # Every recipe downloads at once, so the network waits overlap the first compile
        # (the downloads are most of a first build's idle CPU); the compiles take turns.
        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            fetched = [
                pool.submit(_gobuild.fetch_recipe, chain, recipe, f"step {number}/{steps}")
                for number, recipe in enumerate(todo, 2)
            ]
            for number, (recipe, fetch) in enumerate(zip(todo, fetched, strict=True), 2):
                fetch.result()
                built = _gobuild.build_recipe(chain, recipe, out, f"step {number}/{steps}")
                _keep(cache, marker, chain, recipe, built)
        shutil.rmtree(work, ignore_errors=True)
        size = sum((cache / "bin" / b).stat().st_size for b in BINARIES) // 1024**2
        say(f"built in {elapsed(time.monotonic() - started)}; {cache}/bin holds {size} MB")
        return marker


def _keep(
    cache: Path,
    marker: dict[str, Any],
    chain: _gobuild.Toolchain,
    recipe: Recipe,
    built: dict[str, Path],
) -> None:
    """Move a recipe's binaries into the cache and record them in the marker at once, so a
    later failure keeps what was built."""
    for binary, path in built.items():
        os.replace(path, cache / "bin" / binary)
        marker[binary] = recipe.version
    marker.update(
        go=chain.version,
        built=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    common.write_marker(cache, marker)


def _preflight(cache: Path) -> None:
    free = shutil.disk_usage(cache).free
    if free < FREE_SPACE_NEEDED:
        raise ToolError(
            f"step preflight: only {free // 1024**2} MB free under {cache}; the build needs "
            f"~{FREE_SPACE_NEEDED // 1024**2} MB while it runs; free some space or set "
            "MCP_OAUTH_GATEWAY_CLUSTER_CACHE to a roomier place"
        )


def tool_path(cache: Path, binary: str) -> Path:
    """The absolute path of a cached binary at its wanted version (one of BINARIES)."""
    marker = common.read_marker(cache)
    path = cache / "bin" / binary
    if marker.get(binary) != WANTED[binary] or not os.access(path, os.X_OK):
        raise ToolError(
            f"step path: {binary} {WANTED[binary]} is not in {cache} yet; run "
            f"`dev_cluster.py build` first"
        )
    return path
