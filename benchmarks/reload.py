"""Micro-benchmark: loading and reloading R routes, in process, and the memory across reloads.

Each of the R routes is an HTTPRoute (`/r{i}`), a GatewayPolicy (JWT from one shared remote
keyset, and a CEL rule of its own) and a GatewayBackend, all on one listener of one Gateway,
one file per route in a directory (as `kubectl apply -f dir/` reads). Measured for each R:

- load: read, parse and validate every file (`load_paths`);
- build: the snapshot from the loaded resources (`build_snapshot`);
- assemble: every route's pipeline and the route tables (`Assembly.tables`);
- reload: one policy's rule changed on disk, then load + build + assemble again, as the file
  watcher and the app do;
- RSS: the resident set after the first assembly and after N more reloads (each changing one
  policy), and what `tracemalloc` still holds after 10 more than after two (0: flat).

Loads go through one `FileCache`, as the file watcher's do.

Usage: python benchmarks/reload.py [--reloads N] [--profile FILE] [R ...]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from configs import route_yaml

from mcp_oauth_gateway.asgi import Limits
from mcp_oauth_gateway.controlplane.builder import build_snapshot
from mcp_oauth_gateway.controlplane.collector import collector_paused
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.controlplane.snapshot import Snapshot
from mcp_oauth_gateway.dataplane.routing import RouteTable
from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.resources.loader import FileCache, load_paths
from mcp_oauth_gateway.server import tune_gc
from mcp_oauth_gateway.serving.pipeline import Assembly
from mcp_oauth_gateway.serving.runtime import BrokerRuntime

SIZES = (10, 100, 1_000, 5_000)
# Every policy reads one remote keyset (never fetched: the benchmark does not serve).
REMOTE_JWKS = '{remote: {url: "https://idp.bench.example/certs"}}'
T = TypeVar("T")

GATEWAY = """apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec: {listeners: [{name: http, port: 8080}]}
"""


def write_config(directory: Path, count: int) -> None:
    """The Gateway and `count` routes, one file each."""
    (directory / "gateway.yaml").write_text(GATEWAY)
    for i in range(count):
        write_route(directory, i, f"team-{i}")


def write_route(directory: Path, i: int, group: str) -> None:
    """Route `i`'s file, its policy allowing `group`."""
    route = route_yaml(i, 9000, REMOTE_JWKS, f'"{group}" in jwt.groups')
    (directory / f"route-{i:05d}.yaml").write_text(route)


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """The call's result and its duration in seconds."""
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def rss_mb() -> float:
    """The resident set size now, in MB (`/proc/self/statm`)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def assembly() -> Assembly:
    """What the app builds route pipelines with (no fetches happen: nothing is started)."""
    control = ControlPlane(Snapshot.empty())
    return Assembly(control, RawUpstream(), False, BrokerRuntime(), Limits())


def reload(
    directory: Path, parts: Assembly, cache: FileCache
) -> tuple[Snapshot, dict[int, RouteTable]]:
    """What a file-mode reload does: load, build, install (the control plane's fetcher
    reconciliation, then the app's route tables)."""
    with collector_paused():  # as the watcher's thread does
        snapshot = build_snapshot(load_paths([directory], cache))
    assert snapshot.ok, snapshot.errors[:3]
    parts.control.install(snapshot)
    with collector_paused():  # as the app does
        return snapshot, parts.tables(snapshot)


def profiled(call: Callable[[], T], into: str) -> T:
    """`call` under cProfile, its statistics written to `into`."""
    # benchmarks/profile.py hides the standard library's `profile`, which cProfile imports.
    here = Path(__file__).parent.resolve()
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.modules.pop("profile", None)
    import cProfile

    profiler = cProfile.Profile()
    result = profiler.runcall(call)
    profiler.dump_stats(into)
    return result


def first_load(directory: Path, parts: Assembly, cache: FileCache) -> dict[str, float]:
    """Seconds to load, build and assemble, as `check` and start-up do."""
    with collector_paused():  # as `check` and `serve` load
        loaded, load_s = timed(lambda: load_paths([directory], cache))
        snapshot, build_s = timed(lambda: build_snapshot(loaded))
    assert snapshot.ok, snapshot.errors[:3]
    parts.control.install(snapshot)
    with collector_paused():
        _, assemble_s = timed(lambda: parts.tables(snapshot))
    return {"load": load_s, "build": build_s, "assemble": assemble_s}


def traced_growth(directory: Path, parts: Assembly, cache: FileCache, count: int) -> float:
    """MB still allocated after 10 more reloads, against after two (`tracemalloc`; the first
    ones resize a few process-wide tables)."""
    tracemalloc.start()
    for n in range(2):
        write_route(directory, count // 2, f"warm-{n}")
        current = reload(directory, parts, cache)
    del current
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(1, 11):
        write_route(directory, count // 2, f"traced-{n}")
        current = reload(directory, parts, cache)
    del current
    gc.collect()
    growth = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return growth / 1e6


def measure(
    count: int, reloads: int, profile: str | None, server_gc: bool = False
) -> dict[str, float]:
    """Seconds for load, build, assemble and a one-policy reload; RSS in MB."""
    with tempfile.TemporaryDirectory(prefix="reload-bench-") as tmp:
        directory = Path(tmp)
        write_config(directory, count)
        gc.collect()
        rss_start = rss_mb()
        parts, cache = assembly(), FileCache()
        out = first_load(directory, parts, cache)
        if server_gc:
            tune_gc()
        gc.collect()
        out["rss first"] = rss_mb() - rss_start
        write_route(directory, count // 2, "changed-0")
        started = time.perf_counter()
        if profile is None:
            reload(directory, parts, cache)
        else:
            profiled(lambda: reload(directory, parts, cache), profile)
        out["reload"] = time.perf_counter() - started
        for n in range(1, reloads + 1):
            write_route(directory, count // 2, f"changed-{n}")
            reload(directory, parts, cache)
        gc.collect()
        out["rss after"] = rss_mb() - rss_start
        out["traced growth"] = traced_growth(directory, parts, cache, count)
        return out


def main(argv: Sequence[str]) -> None:
    """Print a Markdown table of load and reload time and RSS against R."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--profile", help="cProfile the first reload of the last R into FILE")
    parser.add_argument(
        "--server-gc",
        action="store_true",
        help="after the first load, tune the collector as `serve` does after start-up (freeze "
        "what exists, collect less often)",
    )
    args = parser.parse_args(argv)
    print(
        f"| R | load s | build s | assemble s | reload (one policy changed) s "
        f"| RSS after first load MB | RSS after {args.reloads} more reloads MB "
        f"| traced growth over 10 more MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for count in args.sizes:
        profile = args.profile if count == args.sizes[-1] else None
        m = measure(count, args.reloads, profile, args.server_gc)
        print(
            f"| {count:,} | {m['load']:.3f} | {m['build']:.3f} | {m['assemble']:.3f} "
            f"| {m['reload']:.3f} | {m['rss first']:.1f} | {m['rss after']:.1f} "
            f"| {m['traced growth']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
