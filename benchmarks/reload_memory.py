"""Memory across configuration changes (issue 39, item 2): the resident set of a real `serve`
process after each of N changes, each waited for until the gateway answers with it.

R routes, each an HTTPRoute (`/r{i}` and its protected resource metadata path), a
GatewayBackend and a GatewayPolicy (JWT against an inline key, the MCP resource metadata, a CEL
rule of its own), on one listener. Change n rewrites one policy, route k = n mod R: its
metadata's `scopesSupported` becomes `[s-n]` (a change every reload accepts: the metadata
decides nobody's access); the change counts as served once
`GET /.well-known/oauth-protected-resource/r{k}` answers `s-n`. Two modes:

- file: every resource in one file, rewritten whole (written beside it, renamed over it) for
  each change; `serve -f FILE --watch-interval 0.05`.
- controller: the same objects in a real Kubernetes API server (tests/devcluster: etcd and
  kube-apiserver), each change a merge patch of the policy; `serve --kubeconfig`
  sees it as a watch event.

RSS is read from /proc/PID/status (VmRSS) after the changes named by --checkpoints. `--before
SRC` runs the same against another source tree (`git archive <commit> src | tar -x -C DIR`,
then DIR/src) for a before/after table; `--malloc-trim` serves through `trimmed_serve.py`
(glibc's malloc_trim(0) after each installed configuration), `--arena-max N` sets
MALLOC_ARENA_MAX: both only to tell allocator fragmentation from a leak.

Usage: python benchmarks/reload_memory.py [--routes 200] [--changes 1000]
           [--modes file,controller] [--before SRC] [--before-changes 200]
           [--malloc-trim] [--arena-max N] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (ROOT / "tests",):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from support import free_port, wait_for_port, wait_until  # noqa: E402

NS = "reload-memory"
ISSUER = "https://idp.bench.example/"
# A P-256 public key (RFC 7515 A.3's): tokens are never sent, the policy only needs one.
JWKS = json.dumps(
    {
        "keys": [
            {
                "kty": "EC",
                "crv": "P-256",
                "kid": "k",
                "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
            }
        ]
    }
)
CHECKPOINTS = (1, 10, 20, 50, 100, 200, 500, 1000)
# How long one change may take to be served before the run gives up.
CHANGE_WAIT = 120.0

Doc = dict[str, Any]


def gateway_docs(port: int, namespace: str) -> list[Doc]:
    """The GatewayClass and the Gateway with one listener on `port`."""
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "mcp-oauth-gateway"},
            "spec": {"controllerName": "mcp-oauth-gateway.dev/gateway-controller"},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": namespace},
            "spec": {
                "gatewayClassName": "mcp-oauth-gateway",
                "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
            },
        },
    ]


def route_docs(i: int, port: int, namespace: str, scope: str) -> list[Doc]:
    """Route i's HTTPRoute, GatewayBackend and GatewayPolicy (scopes `[scope]`)."""
    meta = {"namespace": namespace}
    paths = [f"/r{i}", f"/.well-known/oauth-protected-resource/r{i}"]
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": f"r{i}", **meta},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": p}} for p in paths],
                        "backendRefs": [
                            {
                                "group": "mcp-oauth-gateway.dev",
                                "kind": "GatewayBackend",
                                "name": f"b{i}",
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayBackend",
            "metadata": {"name": f"b{i}", **meta},
            "spec": {
                "mcp": {"targets": [{"name": "t", "static": {"host": "127.0.0.1", "port": 9}}]}
            },
        },
        {
            "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
            "kind": "GatewayPolicy",
            "metadata": {"name": f"p{i}", **meta},
            "spec": policy_spec(i, port, scope),
        },
    ]


def policy_spec(i: int, port: int, scope: str) -> Doc:
    """Policy i: JWT, the MCP resource metadata (scopes `[scope]`), one CEL rule."""
    return {
        "targetRefs": [
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": f"r{i}"}
        ],
        "traffic": {
            "jwtAuthentication": {
                "providers": [{"issuer": ISSUER, "audiences": ["mcp"], "jwks": {"inline": JWKS}}],
                "mcp": {
                    "resourceMetadata": {
                        "resource": f"http://127.0.0.1:{port}/r{i}",
                        "scopesSupported": [scope],
                    }
                },
            },
            "authorization": {
                "action": "Allow",
                "policy": {"matchExpressions": [f'"team-{i}" in jwt.groups']},
            },
        },
    }


def served_scopes(port: int, route: int) -> list[str] | None:
    """The scopes the route's protected resource metadata answers (None: no answer yet)."""
    url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/r{route}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            scopes: list[str] = json.load(answer)["scopes_supported"]
            return scopes
    except (OSError, ValueError, KeyError, urllib.error.HTTPError):
        return None


def answers(port: int, route: int, n: int) -> Callable[[], bool]:
    """Whether the route's metadata answers change n's scopes."""
    return lambda: served_scopes(port, route) == [f"s-{n}"]


def rss_mb(pid: int) -> float:
    """The process's resident set now, in MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"process {pid} has no VmRSS")


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Settings:
    """What one run serves and how."""

    routes: int
    changes: int
    src: Path
    label: str
    checkpoints: tuple[int, ...]
    malloc_trim: bool = False
    arena_max: int | None = None
    # None: serve's own default, as a user runs it.
    watch_interval: float | None = 0.05


@dataclass
class Run:
    """RSS in MB at start (first answer) and after each checkpoint; seconds a change took."""

    mode: str
    src: str
    rss: dict[int, float] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    # The gateway process's CPU seconds (all threads) from each change to its answer.
    cpu: list[float] = field(default_factory=list)


@contextmanager
def serving(
    args: Sequence[str], settings: Settings, log: Path, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """`mcp-oauth-gateway serve ARGS` from `settings.src`, stopped at the end."""
    entry = (
        [str(HERE / "trimmed_serve.py")] if settings.malloc_trim else ["-m", "mcp_oauth_gateway"]
    )
    environment = {**os.environ, **env, "PYTHONPATH": str(settings.src)}
    if settings.arena_max is not None:
        environment["MALLOC_ARENA_MAX"] = str(settings.arena_max)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *entry, "serve", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
        )
        try:
            yield process
        except Exception:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            print("\n".join([f"{log.name} ends:", *tail]), file=sys.stderr)
            raise
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def measure(
    run: Run, settings: Settings, pid: int, port: int, change: Callable[[int], None]
) -> Run:
    """Apply the changes one by one, each until served; RSS at the checkpoints."""
    wait_until(answers(port, 0, 0), CHANGE_WAIT, "the first answer")
    run.rss[0] = rss_mb(pid)
    for n in range(1, settings.changes + 1):
        started, cpu = time.perf_counter(), cpu_seconds(pid)
        change(n)
        wait_until(answers(port, n % settings.routes, n), CHANGE_WAIT, f"change {n} served")
        run.seconds.append(time.perf_counter() - started)
        run.cpu.append(cpu_seconds(pid) - cpu)
        if n in settings.checkpoints:
            run.rss[n] = rss_mb(pid)
            print(
                f"[{run.mode} {run.src}] change {n}: RSS {run.rss[n]:.1f} MB",
                file=sys.stderr,
                flush=True,
            )
    return run


def file_mode(settings: Settings, work: Path) -> Run:
    """Every change rewrites the one file (JSON documents: YAML too, and quick to write)."""
    port = free_port()
    config = work / "resources.yaml"
    texts = [json.dumps(doc) for doc in gateway_docs(port, "default")[1:]]
    texts += [routes_text(i, port, "s-0") for i in range(settings.routes)]

    def write(n: int) -> None:
        if n:
            texts[1 + n % settings.routes] = routes_text(n % settings.routes, port, f"s-{n}")
        staged = work / ".resources.yaml.new"
        staged.write_text("\n---\n".join(texts))
        os.replace(staged, config)

    write(0)
    args = ["-f", str(config)]
    if settings.watch_interval is not None:
        args += ["--watch-interval", str(settings.watch_interval)]
    with serving(args, settings, work / "serve-file.log", {}) as process:
        wait_for_port(port, timeout=CHANGE_WAIT)
        return measure(Run("file", settings.label), settings, process.pid, port, write)


def routes_text(i: int, port: int, scope: str) -> str:
    """Route i's three documents as file text."""
    return "\n---\n".join(json.dumps(doc) for doc in route_docs(i, port, "default", scope))


def controller_mode(settings: Settings, work: Path) -> Run:
    """Every change is a merge patch of one policy on a real API server."""
    from devcluster.apiserver import CRDS, DevApiServer

    DevApiServer.build(echo=True)  # once, into the cache (instant when built)
    server = DevApiServer.start(work / "apiserver")
    try:
        server.apply_crds(
            [*sorted(CRDS.glob("*.yaml")), *sorted((ROOT / "deploy" / "crds").glob("*.yaml"))]
        )
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        server.request("POST", "/api/v1/namespaces", namespace).raise_for_status()
        port = free_port()
        docs = gateway_docs(port, NS)
        for i in range(settings.routes):
            docs += route_docs(i, port, NS, "s-0")
        for doc in docs:
            create(server, doc)

        def patch(n: int) -> None:
            i = n % settings.routes
            body = {"spec": policy_spec(i, port, f"s-{n}")}
            path = f"/apis/mcp-oauth-gateway.dev/v1alpha1/namespaces/{NS}/gatewaypolicies/p{i}"
            answer = server.request(
                "PATCH", path, body, headers={"Content-Type": "application/merge-patch+json"}
            )
            answer.raise_for_status()

        admin = free_port()
        args = [
            "--kubeconfig",
            str(server.kubeconfig),
            "--admin-port",
            str(admin),
            "--allow-hosts=127.0.0.0/8",
            "--lease-namespace",
            NS,
        ]
        with serving(
            args, settings, work / "serve-controller.log", {"POD_NAME": "bench"}
        ) as process:
            wait_for_port(port, timeout=CHANGE_WAIT)
            return measure(
                Run("controller", settings.src.parent.name), settings, process.pid, port, patch
            )
    finally:
        server.stop()


def create(server: Any, doc: Doc) -> None:
    """POST one object."""
    group, version = (
        doc["apiVersion"].split("/") if "/" in doc["apiVersion"] else ("", doc["apiVersion"])
    )
    plural = {
        "GatewayClass": "gatewayclasses",
        "Gateway": "gateways",
        "HTTPRoute": "httproutes",
        "GatewayBackend": "gatewaybackends",
        "GatewayPolicy": "gatewaypolicies",
    }[doc["kind"]]
    namespace = doc["metadata"].get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    answer = server.request("POST", f"/apis/{group}/{version}{where}/{plural}", doc)
    if answer.status_code != 201:
        raise RuntimeError(
            f"creating {doc['kind']} {doc['metadata']['name']}: {answer.status_code} {answer.text}"
        )


def machine() -> str:
    """The CPU, cores, kernel, Python and load: the line a result is read against."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{model}, {os.cpu_count()} cores, Linux {platform.release()}, Python "
        f"{platform.python_version()}, glibc {platform.libc_ver()[1]}; load average {load}"
    )


def table(runs: Sequence[Run], routes: int) -> str:
    """One row per run: RSS at the first answer and at each checkpoint, the growth from change
    100 to the last, and per 100 changes after the 20th (runs of other lengths compare)."""
    points = sorted({n for run in runs for n in run.rss if n})
    head = " | ".join(f"after {n:,}" for n in points)
    lines = [
        f"| mode | code | R | RSS at start MB | {head} | growth 100 → last MB "
        "| MB per 100 changes after the 20th | s per change |",
        "|---|---|---:|---:|" + "---:|" * len(points) + "---:|---:|---:|",
    ]
    for run in runs:
        cells = " | ".join(f"{run.rss[n]:.1f}" if n in run.rss else "" for n in points)
        last = max(run.rss)
        growth = f"{run.rss[last] - run.rss[100]:+.1f}" if 100 in run.rss and last > 100 else ""
        rate = (
            f"{(run.rss[last] - run.rss[20]) * 100 / (last - 20):+.2f}"
            if 20 in run.rss and last > 20
            else ""
        )
        mean = sum(run.seconds) / len(run.seconds) if run.seconds else 0.0
        lines.append(
            f"| {run.mode} | {run.src} | {routes:,} | {run.rss[0]:.1f} | {cells} "
            f"| {growth} | {rate} | {mean:.2f} |"
        )
    return "\n".join(lines)


def one(mode: str, settings: Settings) -> Run:
    """One run of `mode`, in a directory of its own."""
    with tempfile.TemporaryDirectory(prefix=f"reload-memory-{mode}-") as work:
        run = (file_mode if mode == "file" else controller_mode)(settings, Path(work))
    return run


def main(argv: Sequence[str]) -> None:
    """Run the modes (before and after when asked), print the table, write it when asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=200)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--modes", default="file,controller")
    parser.add_argument("--before", type=Path, help="another source tree's src/ to run first")
    parser.add_argument("--before-label", default="before")
    parser.add_argument("--before-changes", type=int, default=200)
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--malloc-trim", action="store_true")
    parser.add_argument("--arena-max", type=int)
    parser.add_argument("--write", type=Path, help="also write the table and machine here")
    args = parser.parse_args(argv)
    # Stopped with SIGTERM, the gateways and API servers it started are stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    started = machine()
    runs: list[Run] = []
    for mode in args.modes.split(","):
        if args.before is not None:
            runs.append(
                one(mode, settings(args, args.before, args.before_label, args.before_changes))
            )
        runs.append(one(mode, settings(args, ROOT / "src", args.label, args.changes)))
    text = table(runs, args.routes)
    print(text)
    if args.write is not None:
        note = " with malloc_trim(0) after each reload" if args.malloc_trim else ""
        arena = f", MALLOC_ARENA_MAX={args.arena_max}" if args.arena_max else ""
        args.write.write_text(
            f"Machine at start: {started}\nat the end: {machine()}\n\n"
            f"`{shlex.join(['python', 'benchmarks/reload_memory.py', *argv])}`{note}{arena}\n\n"
            f"{text}\n"
        )


def settings(args: argparse.Namespace, src: Path, label: str, changes: int) -> Settings:
    """One run's settings from the command line."""
    points = (*(n for n in CHECKPOINTS if n < changes), changes)
    return Settings(args.routes, changes, src, label, points, args.malloc_trim, args.arena_max)


if __name__ == "__main__":
    main(sys.argv[1:])
