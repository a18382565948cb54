"""The build behind `dev_apiserver.py build`: the standalone apiextensions-apiserver compiled
from Debian sid's Go source packages, Debian sid's etcd and kustomize, cached once.

The cache keeps only the three binaries and `versions.json` (the marker a finished build writes
last); `built`, `complete` and `tool_path` read it without starting any process.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _devserver as common
from _aptsandbox import KEYRING, AptSandbox, extract
from _devserver import MARKER, ToolError, elapsed, say

KUBERNETES_VERSION = "v1.36.4"
# The Debian package version that carries the Go sources of KUBERNETES_VERSION.
SOURCE_PACKAGE = "golang-k8s-apiextensions-apiserver-dev"
SOURCE_DEB_VERSION = "0.36.4-"
ETCD_PACKAGE = "etcd-server"
# Debian's kustomize: a prebuilt binary (Depends: libc6 only). Whatever sid ships is taken, as
# long as it is this major version: a new major may render `deploy/` differently.
KUSTOMIZE = "kustomize"
KUSTOMIZE_DEB_VERSION = "5."
APISERVER = "apiextensions-apiserver"
# Measured at the peak: ~2 GB of extracted sources, ~1.5 GB of Go build cache, the toolchain.
FREE_SPACE_NEEDED = 4 * 1024**3
# Adding kustomize alone: the sid index, a ~7 MB package and its ~23 MB binary.
KUSTOMIZE_SPACE_NEEDED = 100 * 1024**2


def cache_dir() -> Path:
    """The build cache: $MCP_OAUTH_GATEWAY_APISERVER_CACHE, else under $XDG_CACHE_HOME."""
    explicit = os.environ.get("MCP_OAUTH_GATEWAY_APISERVER_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcp-oauth-gateway" / f"apiserver-{KUBERNETES_VERSION}"


def built(cache: Path) -> dict[str, Any] | None:
    """The marker of a finished build of KUBERNETES_VERSION, or None (cheap: no process runs)."""
    try:
        marker = json.loads((cache / MARKER).read_text())
    except (OSError, ValueError):
        return None
    binaries = [cache / "bin" / APISERVER, cache / "bin" / "etcd"]
    if marker.get("apiserver") != KUBERNETES_VERSION:
        return None
    if not all(os.access(path, os.X_OK) for path in binaries):
        return None
    return dict(marker)


def complete(cache: Path) -> dict[str, Any] | None:
    """The marker when all `build` makes is cached: the API server, etcd and kustomize."""
    marker = built(cache)
    if marker is None or not marker.get("kustomize_deb"):
        return None
    return marker if os.access(cache / "bin" / KUSTOMIZE, os.X_OK) else None


def tool_path(cache: Path, name: str) -> Path:
    """The absolute path of a cached binary (KUSTOMIZE, "etcd" or APISERVER)."""
    marker = complete(cache) if name == KUSTOMIZE else built(cache)
    if marker is None:
        raise ToolError(
            f"step path: {name} is not in {cache} yet; run `dev_apiserver.py build` first"
        )
    return cache / "bin" / name


def build(cache: Path) -> dict[str, Any]:
    """Download and build once; later calls return the cached build's versions at once.

    A cache that has the API server but not kustomize (built before kustomize was added) gets
    kustomize only: the API server build is kept.
    """
    marker = complete(cache)
    if marker is not None:
        return marker
    with common.build_lock(cache):
        marker = complete(cache)
        if marker is not None:
            return marker
        started = time.monotonic()
        marker = built(cache)
        _preflight(cache, FREE_SPACE_NEEDED if marker is None else KUSTOMIZE_SPACE_NEEDED)
        work = cache / "work"
        # A half-finished earlier attempt is not trusted: start from an empty work directory.
        shutil.rmtree(work, ignore_errors=True)
        apt = AptSandbox(work / "apt")
        apt.update("step 1/6" if marker is None else KUSTOMIZE)
        if marker is None:
            marker = _build_in(apt, work, cache)
            say(f"built {APISERVER} {KUBERNETES_VERSION} in {elapsed(time.monotonic() - started)}")
            started = time.monotonic()
        marker = _add_kustomize(apt, work, cache, marker)
        say(f"added {KUSTOMIZE} {marker[KUSTOMIZE]} in {elapsed(time.monotonic() - started)}")
        shutil.rmtree(work, ignore_errors=True)
        return marker


def _build_in(apt: AptSandbox, work: Path, cache: Path) -> dict[str, Any]:
    versions = apt.candidate_versions([SOURCE_PACKAGE, ETCD_PACKAGE])
    if not versions[SOURCE_PACKAGE].startswith(SOURCE_DEB_VERSION):
        raise ToolError(
            f"step resolve: Debian sid now ships {SOURCE_PACKAGE} {versions[SOURCE_PACKAGE]}, "
            f"not {SOURCE_DEB_VERSION}*; update KUBERNETES_VERSION and SOURCE_DEB_VERSION in "
            f"{Path(__file__).name}"
        )
    packages = apt.go_source_closure(SOURCE_PACKAGE)
    note = f"step 3/6: downloading {len(packages) + 1} packages (~220 MB)"
    debs = apt.download([*packages, ETCD_PACKAGE], work / "debs", note)
    root = work / "root"
    extract(debs, root, f"step 4/6: extracting {len(debs)} packages with dpkg-deb")
    shutil.rmtree(work / "debs")
    go = common.fetch_go(work / "go", "step 5/6")
    binary = _go_build(go, root, work)
    etcd = root / "usr" / "bin" / "etcd"
    # The standalone server has no --version flag: `start` checks /version on every start;
    # here --help proves the binary runs on this machine.
    _verify(binary, "--help", "--etcd-servers")
    marker = {
        "apiserver": KUBERNETES_VERSION,
        "apiextensions_deb": versions[SOURCE_PACKAGE],
        "etcd": _verify(etcd, "--version", "etcd Version:").split(":")[-1].strip(),
        "etcd_deb": versions[ETCD_PACKAGE],
        "go": common.go_version(go),
        "source_packages": len(packages),
        "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    bin_dir = cache / "bin"
    bin_dir.mkdir(exist_ok=True)
    os.replace(binary, bin_dir / APISERVER)
    os.replace(etcd, bin_dir / "etcd")
    # The marker is written last: its presence is what makes the next `build` skip this.
    common.write_marker(cache, marker)
    return marker


def _add_kustomize(
    apt: AptSandbox, work: Path, cache: Path, marker: dict[str, Any]
) -> dict[str, Any]:
    """Debian sid's prebuilt kustomize into <cache>/bin, recorded in the marker (no compiling)."""
    version = apt.candidate_versions([KUSTOMIZE])[KUSTOMIZE]
    if not version.startswith(KUSTOMIZE_DEB_VERSION):
        raise ToolError(
            f"step {KUSTOMIZE}: Debian sid now ships {KUSTOMIZE} {version}, not "
            f"{KUSTOMIZE_DEB_VERSION}*; check that deploy/ renders the same with it, then update "
            f"KUSTOMIZE_DEB_VERSION in {Path(__file__).name}"
        )
    say(f"{KUSTOMIZE}: downloading the prebuilt {KUSTOMIZE} {version} from Debian sid (~7 MB)")
    debs = apt.download([KUSTOMIZE], work / "kustomize-debs", None)
    root = work / "kustomize-root"
    extract(debs, root, None)
    binary = root / "usr" / "bin" / KUSTOMIZE
    _check_kustomize(binary, work / "kustomize-check")
    # Debian's build does not stamp its version (`kustomize version` prints "(devel)"), so the
    # upstream version is the Debian version without epoch, "+ds" suffix and revision.
    upstream = version.split(":")[-1].split("+")[0].rsplit("-", 1)[0]
    marker = {**marker, KUSTOMIZE: upstream, "kustomize_deb": version}
    (cache / "bin").mkdir(exist_ok=True)
    os.replace(binary, cache / "bin" / KUSTOMIZE)
    common.write_marker(cache, marker)
    return marker


def _check_kustomize(binary: Path, sample: Path) -> None:
    """`kustomize version` runs here, and `kustomize build` renders a one-ConfigMap sample."""
    sample.mkdir(parents=True, exist_ok=True)
    (sample / "kustomization.yaml").write_text(
        "configMapGenerator:\n- name: dev-apiserver-check\n  literals: [ok=yes]\n"
    )
    for args, expected in ((["version"], ""), (["build", str(sample)], "dev-apiserver-check")):
        try:
            result = subprocess.run(
                [str(binary), *args], capture_output=True, text=True, timeout=60, check=False
            )
            code, text = result.returncode, (result.stdout + result.stderr).strip()
        except (OSError, subprocess.TimeoutExpired) as error:
            code, text = -1, str(error)
        if code != 0 or not text or expected not in text:
            raise ToolError(
                f"step verify: {KUSTOMIZE} {args[0]} exited {code} printing {text[:120]!r}; "
                "Debian sid's binary needs glibc >= 2.34 (Debian 12, Ubuntu 22.04 or newer)"
            )


def _preflight(cache: Path, needed: int) -> None:
    for tool, package in (("apt-get", "apt"), ("apt-cache", "apt"), ("dpkg-deb", "dpkg")):
        if shutil.which(tool) is None:
            raise ToolError(
                f"step preflight: {tool} not found; the build needs Debian's package tools "
                f"(install {package}, i.e. run on Debian or Ubuntu)"
            )
    if not KEYRING.is_file():
        raise ToolError(
            f"step preflight: {KEYRING} is missing; install the debian-archive-keyring package "
            "(it verifies the Debian sid index)"
        )
    free = shutil.disk_usage(cache).free
    if free < needed:
        raise ToolError(
            f"step preflight: only {free // 1024**2} MB free under {cache}; the build needs "
            f"~{needed // 1024**2} MB while it runs; free some space or set "
            "MCP_OAUTH_GATEWAY_APISERVER_CACHE to a roomier place"
        )


def _go_build(go: Path, root: Path, work: Path) -> Path:
    output = work / APISERVER
    log = work / "go-build.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GO")},
        # The Debian packages lay the sources out as a GOPATH, not as Go modules.
        "GO111MODULE": "off",
        "GOPATH": str(root / "usr" / "share" / "gocode"),
        "GOROOT": str(go),
        "GOTOOLCHAIN": "local",
        "GOENV": "off",
        "GOTELEMETRY": "off",
        "GOCACHE": str(work / "gocache"),
        "CGO_ENABLED": "0",
    }
    ldflags = f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}"
    command = [str(go / "bin" / "go"), "build", "-o", str(output), "-ldflags", ldflags]
    say(
        f"step 6/6: building {APISERVER} with {common.go_version(go)}: takes ~3-6 minutes on 2 "
        f"cores (this machine has {os.cpu_count()}); log: {log}"
    )
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*command, "k8s.io/apiextensions-apiserver"],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        while proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            if proc.returncode is None:
                say(f"  still building ({elapsed(time.monotonic() - started)})")
    if proc.returncode != 0 or not output.is_file():
        print(common.tail(log), file=sys.stderr)
        raise ToolError(f"step build: go build failed (exit {proc.returncode}); see {log}")
    return output


def _verify(binary: Path, flag: str, expected: str) -> str:
    result = subprocess.run(
        [str(binary), flag], capture_output=True, text=True, timeout=60, check=False
    )
    text = (result.stdout + result.stderr).strip()
    line = next((line for line in text.splitlines() if expected in line), None)
    if result.returncode != 0 or line is None:
        raise ToolError(
            f"step verify: {binary.name} {flag} printed {text[:120]!r}, expected {expected!r}"
        )
    return line.strip()
