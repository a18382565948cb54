"""Benchmark: one policy changed among R routes, in process, through the gateway's own reload
paths, and the memory across reloads.

Each of the R routes is an HTTPRoute (`/r{i}`), a GatewayPolicy (JWT from one shared remote
keyset, and an Allow rule of its own) and a GatewayBackend, all on one listener of one Gateway.
Three ways the objects come in:

- files: one file per route in a directory (as `kubectl apply -f dir/` reads);
- one file: every route in one file;
- controller: the objects as an API server returns them (server-filled metadata), the change a
  watch event, built as the controller builds (no API server: the objects are handed over).

The change: the middle route's policy drops one of its Allow rules, a change the file watcher
accepts (a reload may narrow). Files: the watcher's own `reload()` (read, build, judge against
the running configuration, install, build the route tables); controller: the watch event, then
the controller's own `rebuild()` (build, install, route tables). Not counted: the watcher's
polling (`--watch-interval`, 1 s by default, then 0.1 s of settling) and the controller's
settling (0.1 s after the last event).

Reported per way and R: the first load (what start-up pays: read, build, route tables); per
reload the wall time and the process's CPU time (median and slowest of N); RSS added by the
first load and after the N reloads. The collector is tuned after the first load as `serve`
does. Run at an earlier commit (PYTHONPATH=that checkout's src) for a "before" table.

Usage: python benchmarks/reload.py [--reloads N] [--ways files,one-file,controller] [R ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from configs import AUDIENCE, ISSUER

from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.controlplane.snapshot import Snapshot
from mcp_oauth_gateway.controlplane.watch import ConfigWatcher
from mcp_oauth_gateway.server import tune_gc
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions

SIZES = (1_000, 5_000)
WAYS = ("files", "one-file", "controller")
# Rules of the changed policy: each reload drops one.
RULES = 64
JWKS = "https://idp.bench.example/certs"  # never fetched: nothing is started
GATEWAY = """apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: mcp
  listeners: [{name: http, port: 8080, allowedRoutes: {namespaces: {from: All}}}]
"""
CLASS = """apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: mcp}
spec: {controllerName: mcp-oauth-gateway.dev/gateway-controller}
"""


def route_text(i: int, rules: Sequence[str]) -> str:
    """Route `i`, its backend and its policy (Allow `rules`), as YAML documents."""
    allowed = ", ".join(f"'{rule}'" for rule in rules)
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: apps}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /r{i}}}}}]
      backendRefs: [{{name: b{i}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: b{i}, namespace: apps}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: 9000}}}}]}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: p{i}, namespace: apps}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: r{i}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [{AUDIENCE}]
          jwks: {{remote: {{url: "{JWKS}"}}}}
    authorization:
      action: Allow
      policy: {{matchExpressions: [{allowed}]}}
"""


def rules_of(i: int, count: int, dropped: int) -> list[str]:
    """Route `i`'s rules after `dropped` reloads: the middle route's lose one each."""
    if i != count // 2:
        return [f'"team-{i}" in jwt.groups']
    return [f'"group-{k}" in jwt.groups' for k in range(dropped, RULES)]


def rss_mb() -> float:
    """The resident set size now, in MB (`/proc/self/statm`)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


class FileWay:
    """Routes in files, reloaded by the file watcher."""

    def __init__(self, directory: Path, count: int, one_file: bool):
        self.directory, self.count, self.one_file = directory, count, one_file
        self.write(0)
        self.app: GatewayApp | None = None
        self.watcher: ConfigWatcher | None = None

    def write(self, dropped: int) -> None:
        """The resources after `dropped` reloads (at the start: all of them)."""
        if self.one_file:
            documents = [route_text(i, rules_of(i, self.count, dropped)) for i in range(self.count)]
            (self.directory / "all.yaml").write_text("---\n".join([GATEWAY, *documents]))
            return
        if dropped == 0:
            (self.directory / "gateway.yaml").write_text(GATEWAY)
            for i in range(self.count):
                self._route_file(i, 0)
        else:
            self._route_file(self.count // 2, dropped)

    def _route_file(self, i: int, dropped: int) -> None:
        text = route_text(i, rules_of(i, self.count, dropped))
        (self.directory / f"route-{i:05d}.yaml").write_text(text)

    async def start(self) -> None:
        """Load as `serve` does (through the watcher's caches where it has them)."""
        paths = [str(self.directory)]
        snapshot, caches = first_load(paths)
        control = ControlPlane(snapshot)
        extra: dict[str, Any] = {} if caches is None else {"caches": caches}
        self.watcher = ConfigWatcher(paths, control, **extra)
        self.app = GatewayApp(control, watcher=self.watcher)

    async def change(self, dropped: int) -> None:
        """One policy narrowed on disk, and the watcher's reload."""
        assert self.watcher is not None
        self.write(dropped)
        assert await self.watcher.reload(), self.watcher.last_error


def first_load(paths: list[str]) -> tuple[Snapshot, Any]:
    """The snapshot `serve` starts from, and the caches the watcher is given (None before the
    incremental build)."""
    try:
        from mcp_oauth_gateway.controlplane.watch import ReloadCaches, load_into
    except ImportError:
        from mcp_oauth_gateway.cli.common import load

        return load(paths), None
    caches = ReloadCaches()
    return load_into(paths, caches), caches


class ControllerWay:
    """Routes from an API server's objects, rebuilt by the controller after a watch event."""

    def __init__(self, count: int):
        import yaml

        from mcp_oauth_gateway.kube.kinds import WATCHED

        self.count = count
        self.kinds = {kind.kind: kind for kind in WATCHED}
        text = "---\n".join(
            [CLASS, GATEWAY, *(route_text(i, rules_of(i, count, 0)) for i in range(count))]
        )
        self.objects = [served(document, n) for n, document in enumerate(yaml.safe_load_all(text))]
        self.controller: Any = None
        self.app: GatewayApp | None = None

    async def start(self) -> None:
        """Every kind listed, then the first build, as the controller starts."""
        from mcp_oauth_gateway.controlplane.cluster import Cluster
        from mcp_oauth_gateway.controlplane.deployment import Deployment
        from mcp_oauth_gateway.controlplane.egress import EgressRules
        from mcp_oauth_gateway.kube.controller import Controller, ControllerOptions

        egress = EgressRules.of(["127.0.0.0/8", "idp.bench.example"])
        deployment = Deployment(processes=1, cluster=Cluster(egress=egress))
        control = ControlPlane(Snapshot.empty())
        options = ControllerOptions(None, "bench", "default", egress=egress)
        self.controller = Controller(_NoClient(), control, options, deployment)
        for kind in self.kinds.values():
            items = [raw for raw in self.objects if raw["kind"] == kind.kind]
            self.controller.cache.replace_all(kind, items, "1")
        self.app = GatewayApp(control, ServeOptions(deployment=deployment))
        await self.controller.rebuild()

    async def change(self, dropped: int) -> None:
        """The watch event of one policy narrowed, and the controller's rebuild."""
        import copy

        i = self.count // 2
        raw = copy.deepcopy(next(o for o in self.objects if o["metadata"]["name"] == f"p{i}"))
        policy = raw["spec"]["traffic"]["authorization"]["policy"]
        policy["matchExpressions"] = rules_of(i, self.count, dropped)
        raw["metadata"]["generation"] += dropped
        raw["metadata"]["resourceVersion"] = str(10_000 + dropped)
        self.controller.cache.apply(self.kinds["GatewayPolicy"], "MODIFIED", raw)
        await self.controller.rebuild()


class _NoClient:
    """The controller's API client, never called here (no watch, lease or status write runs)."""

    server = "none"
    calls: tuple[()] = ()


def served(document: dict[str, Any], number: int) -> dict[str, Any]:
    """A document as an API server returns it: server-filled metadata."""
    document["metadata"].update(
        uid=f"uid-{number}",
        resourceVersion=str(number + 1),
        generation=1,
        creationTimestamp="2026-12-01T00:00:00Z",
        managedFields=[{"manager": "kubectl", "operation": "Apply"}],
    )
    return document


def served_routes(app: GatewayApp, count: int) -> None:
    """Every route is served, each with its policy, the changed one's with its last rules."""
    entries = [entry for table in app.tables.values() for entry in table.entries]
    assert len(entries) == count, (len(entries), count)
    assert all(entry.route.policy is not None for entry in entries)
    assert all(entry.route.policy.invalid is None for entry in entries if entry.route.policy)


async def timed(call: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """Wall and CPU seconds of one awaited call."""
    wall, cpu = time.perf_counter(), time.process_time()
    await call()
    return time.perf_counter() - wall, time.process_time() - cpu


async def measure(way: str, count: int, reloads: int) -> dict[str, float]:
    """First load, reloads and RSS of one way at `count` routes."""
    with tempfile.TemporaryDirectory(prefix="reload-bench-") as tmp:
        start = rss_mb()
        subject: FileWay | ControllerWay = (
            ControllerWay(count)
            if way == "controller"
            else FileWay(Path(tmp), count, way == "one-file")
        )
        first, _ = await timed(subject.start)
        assert subject.app is not None
        served_routes(subject.app, count)
        tune_gc()  # as `serve` does once started
        out = {"first": first, "rss first": rss_mb() - start}
        walls, cpus = [], []
        for dropped in range(1, reloads + 1):
            wall, cpu = await timed(lambda d=dropped: subject.change(d))
            walls.append(wall)
            cpus.append(cpu)
        served_routes(subject.app, count)
        out.update(
            wall=statistics.median(walls),
            slowest=max(walls),
            cpu=statistics.median(cpus),
            rss=rss_mb() - start,
        )
        return out


def main(argv: Sequence[str]) -> None:
    """Print a Markdown table: first load, reload wall and CPU time, RSS, per way and R."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--reloads", type=int, default=20, help=f"at most {RULES - 1}")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"some of {', '.join(WAYS)}")
    args = parser.parse_args(argv)
    print(
        "| way | R | first load s | reload s (median) | slowest s | reload CPU s (median) "
        f"| RSS after first load MB | RSS after {args.reloads} reloads MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for way in args.ways.split(","):
        for count in args.sizes:
            m = asyncio.run(measure(way, count, min(args.reloads, RULES - 1)))
            print(
                f"| {way} | {count:,} | {m['first']:.2f} | {m['wall']:.3f} | {m['slowest']:.3f} "
                f"| {m['cpu']:.3f} | {m['rss first']:.1f} | {m['rss']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
