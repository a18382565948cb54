"""Streams and idle connections at scale, from outside: a real SSE backend, the gateway (`serve`,
RS256 bearer tokens and one CEL rule, as in run.py) and client processes on loopback.

- Streams: N SSE streams open at once, the backend sending a fixed number of events a second
  over all of them, spread evenly (so the work per second does not change with N). For each
  event its delay (client arrival minus the backend's send time, one clock); the gateway's
  added delay is its p50/p99/max minus the same client reading the backend directly. Also
  events lost (gaps in each stream's sequence), streams broken, and the gateway's resident
  memory per open stream.
- Idle connections: K keep-alive connections (one POST each, then silent) held by one
  process, and one client doing sequential `tools/call` POSTs through the gateway: its p50/p99
  against K, and the resident memory per idle connection.
- With --burst M: each N again (where N + M fits under the gateway's cap) while M more streams
  open and, 2 s later, close inside the window; the collections, and when the worst event
  arrived against the burst's opening and closing (in the JSON lines on stderr).

Each row also gives the gateway's CPU per event (or request) and how much of its core other
processes used during the window (`/proc/stat`): on a shared machine the tail follows that.
To measure another tree's code, run with PYTHONPATH=<tree>/src.

The gateway runs with every garbage collection timed (stream_peers.py `gateway`): the report
gives the collections inside each measurement window. Gateway on core 0, backend and clients on
core 1 (as run.py). Each point runs --rounds times with fresh processes; tables give medians.

Usage: python benchmarks/streams.py [--streams N ...] [--idle K ...] [--rate R] [--seconds S]
           [--rounds R] [--burst M] [--output FILE] [--gateway-flag=--workers=2 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import select
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from configs import gateway_yaml
from processes import (
    CLK_TCK,
    HERE,
    LOAD_CORE,
    PY,
    SERVER_CORE,
    cpu_seconds,
    free_port,
    pinned,
    rss_mb,
)
from servers import Server, Servers

from mcp_oauth_gateway.connections import default_max_connections

PEERS = str(HERE / "stream_peers.py")
STREAMS = (100, 1_000, 2_500, 5_000, 9_500)
IDLE = (0, 5_000, 10_000, 19_000)
# Client connections come from four loopback addresses: with tens of thousands from one, the
# kernel's search for a free ephemeral port toward the same address slows every connect down.
SOURCES = tuple(f"127.0.0.{i}" for i in range(1, 5))
Points = list[list[dict[str, Any]]]


def raise_nofile() -> tuple[int, int]:
    """This process's descriptor limit raised to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def core_busy(core: str = SERVER_CORE) -> float:
    """CPU seconds the core has spent busy since boot (/proc/stat), whoever ran on it."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            user, nice, system, _, _, irq, softirq, steal = map(int, line.split()[1:9])
            return (user + nice + system + irq + softirq + steal) / CLK_TCK
    return 0.0


def read_json(popen: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """The next JSON line a peer prints; RuntimeError if none comes within `timeout`."""
    assert popen.stdout is not None
    ready, _, _ = select.select([popen.stdout], [], [], timeout)
    line = popen.stdout.readline() if ready else b""
    if not line:
        raise RuntimeError(f"{popen.args!r} printed nothing within {timeout:g}s")
    result: dict[str, Any] = json.loads(line)
    return result


def collections(trace: Path, window: tuple[float, float]) -> dict[str, float]:
    """The gateway's garbage collections that started inside `window`: count and longest
    pause per generation (ms)."""
    pauses = json.loads(trace.read_text()) if trace.exists() else []
    out: dict[str, float] = {}
    for started, ms, generation, *_ in pauses:
        if window[0] <= started <= window[1]:
            out[f"gen{generation}"] = out.get(f"gen{generation}", 0) + 1
            out[f"gen{generation}_max"] = max(out.get(f"gen{generation}_max", 0.0), ms)
            out["gc_ms"] = out.get("gc_ms", 0.0) + ms
    return out


class StreamBench:
    """Starts the backend, the gateway and the clients of each point; stops them all."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.servers = Servers(args)
        self.token = self.servers.token
        self.cap_line = ""

    def peer(self, *args: object, stdin: bool = False) -> subprocess.Popen[bytes]:
        """A client process on the load core, printing JSON lines."""
        return subprocess.Popen(
            pinned(LOAD_CORE, [PY, PEERS, *map(str, args)]),
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            start_new_session=True,
        )

    def backend(self, rate: float) -> Server:
        """The SSE/JSON backend on the load core."""
        port = free_port()
        return self.servers.spawn(
            "backend", [PY, PEERS, "backend", str(port), str(rate)], LOAD_CORE, port
        )

    def gateway(self, backend_port: int, flags: list[str]) -> tuple[Server, Path]:
        """The gateway in front of `backend_port`, its collections timed into the returned
        file, keep-alive connections kept for 10 minutes."""
        port = free_port()
        servers = self.servers
        jwks = json.dumps({"keys": [servers.key.as_dict(private=False)]})
        config = servers.work / f"gateway-{port}.yaml"
        config.write_text(gateway_yaml(port, backend_port, jwks, "", ""))
        trace = servers.work / f"gc-{port}.json"
        cmd = [PY, PEERS, "gateway", str(trace), "serve", "-f", str(config)]
        cmd += ["--idle-timeout", "600", *flags, *self.args.gateway_flag]
        return servers.spawn("gateway", cmd, SERVER_CORE, port), trace

    def stop(self, server: Server) -> None:
        """Stop one server and note the connection cap it logged."""
        server.stop()
        self.servers.servers.remove(server)
        if server.name == "gateway" and not self.cap_line:
            log = (self.servers.work / "gateway.log").read_text(errors="replace")
            found = re.search(
                r"connections: at most \d+ open per process \(descriptor limit \d+\)", log
            )
            self.cap_line = found.group(0) if found else ""

    def streams_through(
        self, port: int, count: int, gateway: Server | None, burst: int = 0
    ) -> dict[str, Any]:
        """`count` streams read through `port`: delays, losses, and the gateway's memory;
        with `burst`, that many more streams open (and close) inside the window."""
        base = rss_mb(gateway.popen.pid) if gateway else 0.0
        client = self.peer(
            "streams",
            "127.0.0.1",
            port,
            count,
            self.token,
            self.args.warmup,
            self.args.seconds,
            *SOURCES,
        )
        try:
            ready = read_json(client, 120)
            memory = rss_mb(gateway.popen.pid) if gateway else 0.0
            time.sleep(self.args.warmup)
            cpu, busy = cpu_seconds(gateway.popen.pid) if gateway else 0.0, core_busy()
            if burst:
                burst_at = time.monotonic()
                late = self.peer("streams", "127.0.0.1", port, burst, self.token, 1, 1, *SOURCES)
                opened = read_json(late, 60)
            result = read_json(client, self.args.seconds + 60)
            if burst:
                result["burst_open_s"], result["burst_failed"] = opened["open_s"], opened["failed"]
                # When the burst began and when its streams were closed, against the worst
                # event's arrival (worst_at): which of the two the longest stall belongs to.
                result["burst_at"], result["burst_closed_at"] = (
                    burst_at,
                    read_json(late, 60)["window"][1],
                )
                late.wait(30)
            cpu = cpu_seconds(gateway.popen.pid) - cpu if gateway else 0.0
            # What else ran on the gateway's core: a neighbour there makes the tail.
            result["others_cpu"] = (core_busy() - busy - cpu) / self.args.seconds
            client.wait(60)
        finally:
            if client.poll() is None:
                client.kill()
        result.update(ready)
        result["kb_per_stream"] = (memory - base) * 1024 / max(ready["ready"], 1)
        result["base_mb"] = base
        result["us_per_event"] = cpu * 1e6 / max(result["count"], 1)
        return result

    def stream_point(self, count: int) -> dict[str, Any]:
        """Direct, then through a fresh gateway, at `count` streams."""
        backend = self.backend(self.args.rate)
        try:
            direct = self.streams_through(backend.port, count, None)
            gateway, trace = self.gateway(backend.port, [])
            try:
                through = self.streams_through(gateway.port, count, gateway)
            finally:
                self.stop(gateway)
            through.update(collections(trace, tuple(through["window"])))
        finally:
            self.stop(backend)
        added = {f"added_{k}": through[k] - direct[k] for k in ("p50", "p99", "max")}
        return {"n": count, "direct": direct, "gateway": through, **added}

    def burst_point(self, count: int) -> dict[str, Any]:
        """Through a fresh gateway only, at `count` streams while --burst more open."""
        backend = self.backend(self.args.rate)
        try:
            gateway, trace = self.gateway(backend.port, [])
            try:
                through = self.streams_through(gateway.port, count, gateway, self.args.burst)
            finally:
                self.stop(gateway)
            through.update(collections(trace, tuple(through["window"])))
        finally:
            self.stop(backend)
        return {"n": count, "gateway": through}

    def idle_point(self, count: int) -> dict[str, Any]:
        """The active client's latencies with `count` idle connections held open."""
        backend = self.backend(0)
        flags = ["--max-connections", str(count + 500)] if count > 9_000 else []
        gateway, trace = self.gateway(backend.port, flags)
        holder = None
        try:
            base = rss_mb(gateway.popen.pid)
            ready: dict[str, Any] = {"ready": 0, "failed": 0}
            if count:
                holder = self.peer(
                    "idle", "127.0.0.1", gateway.port, count, self.token, *SOURCES, stdin=True
                )
                ready = read_json(holder, 180)
            memory = rss_mb(gateway.popen.pid)
            time.sleep(self.args.warmup)
            window, cpu = (time.monotonic(), 0.0), cpu_seconds(gateway.popen.pid)
            busy = core_busy()
            active = self.peer("active", "127.0.0.1", gateway.port, self.token, self.args.seconds)
            result = read_json(active, self.args.seconds + 60)
            window, cpu = (window[0], time.monotonic()), cpu_seconds(gateway.popen.pid) - cpu
            result["others_cpu"] = (core_busy() - busy - cpu) / (window[1] - window[0])
            result["us_per_request"] = cpu * 1e6 / max(result["count"], 1)
            active.wait(30)
            if holder is not None:
                assert holder.stdin is not None
                holder.stdin.close()
                result.update(read_json(holder, 60))
                holder.wait(60)
        finally:
            if holder is not None and holder.poll() is None:
                holder.kill()
            self.stop(gateway)
            self.stop(backend)
        result.update(ready)
        result.update(collections(trace, window))
        result["kb_per_conn"] = (memory - base) * 1024 / max(ready["ready"], 1)
        return {"k": count, **result}

    def run(self) -> tuple[Points, Points, Points]:
        """Every round of every point: (stream points, burst points, idle points)."""
        streams: Points = [[] for _ in self.args.streams]
        # A burst only where it fits under the gateway's connection cap.
        room = default_max_connections(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        bursting = [n for n in self.args.streams if self.args.burst and n + self.args.burst < room]
        bursts: Points = [[] for _ in bursting]
        idle: Points = [[] for _ in self.args.idle]
        try:
            for round_ in range(self.args.rounds):
                for i, count in enumerate(self.args.streams):
                    streams[i].append(self.stream_point(count))
                    _progress(f"round {round_ + 1}: {count} streams", streams[i][-1])
                    if count in bursting:
                        j = bursting.index(count)
                        bursts[j].append(self.burst_point(count))
                        _progress(f"round {round_ + 1}: {count} + burst", bursts[j][-1])
                for i, count in enumerate(self.args.idle):
                    idle[i].append(self.idle_point(count))
                    _progress(f"round {round_ + 1}: {count} idle", idle[i][-1])
        finally:
            self.servers.stop_all()
        return streams, bursts, idle


def _progress(what: str, point: dict[str, Any]) -> None:
    print(f"{what}: {json.dumps(point)}", file=sys.stderr, flush=True)


def _median(points: list[dict[str, Any]], *path: str) -> float:
    values = []
    for point in points:
        value: Any = point
        for key in path:
            value = value.get(key, 0) if isinstance(value, dict) else 0
        values.append(float(value))
    return statistics.median(values)


def _gc_cell(points: list[dict[str, Any]], where: tuple[str, ...] = ()) -> str:
    counts = " / ".join(f"{_median(points, *where, f'gen{g}'):g}" for g in range(3))
    return f"{counts}, {_median(points, *where, 'gc_ms'):.1f} ms"


def stream_table(rows: list[list[dict[str, Any]]]) -> list[str]:
    """The streams table: one row per N, medians of the rounds."""
    lines = [
        "| streams | added p50 (ms) | added p99 (ms) | added max (ms) | gateway p50 / p99 / max "
        "(ms) | direct p50 / p99 / max (ms) | events (gateway) | lost gateway / direct | "
        "broken | RSS per stream | gateway CPU per event | others on its core | "
        "collections gen0 / 1 / 2 in the window, time |",
        "|---:|---:|---:|---:|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for points in rows:
        g = {k: _median(points, "gateway", k) for k in ("p50", "p99", "max", "count", "lost")}
        d = {k: _median(points, "direct", k) for k in ("p50", "p99", "max", "lost")}
        lines.append(
            f"| {points[0]['n']:,} | {_median(points, 'added_p50'):.2f} | "
            f"{_median(points, 'added_p99'):.2f} | {_median(points, 'added_max'):.1f} | "
            f"{g['p50']:.2f} / {g['p99']:.2f} / {g['max']:.1f} | "
            f"{d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.1f} | {g['count']:,.0f} | "
            f"{g['lost']:g} / {d['lost']:g} | {_median(points, 'gateway', 'broken'):g} | "
            f"{_median(points, 'gateway', 'kb_per_stream'):.1f} KB | "
            f"{_median(points, 'gateway', 'us_per_event'):.0f} µs | "
            f"{_median(points, 'gateway', 'others_cpu'):.0%} | "
            f"{_gc_cell(points, ('gateway',))} |"
        )
    return lines


def burst_table(rows: Points, burst: int) -> list[str]:
    """The gateway's delays at N streams while `burst` more open and close in the window."""
    lines = [
        f"| streams | while {burst:,} more open: gateway p50 / p99 / max (ms) | opening them "
        "took | refused | collections gen0 / 1 / 2 in the window, time | others on its core |",
        "|---:|---|---:|---:|---|---:|",
    ]
    for points in rows:
        g = {k: _median(points, "gateway", k) for k in ("p50", "p99", "max")}
        lines.append(
            f"| {points[0]['n']:,} | {g['p50']:.2f} / {g['p99']:.2f} / {g['max']:.1f} | "
            f"{_median(points, 'gateway', 'burst_open_s'):.1f} s | "
            f"{_median(points, 'gateway', 'burst_failed'):g} | "
            f"{_gc_cell(points, ('gateway',))} | {_median(points, 'gateway', 'others_cpu'):.0%} |"
        )
    return lines


def idle_table(rows: list[list[dict[str, Any]]]) -> list[str]:
    """The idle-connections table: one row per K, medians of the rounds."""
    lines = [
        "| idle connections | held | active p50 (ms) | active p99 (ms) | active max (ms) | "
        "requests | RSS per idle connection | gateway CPU per request | others on its core | "
        "collections gen0 / 1 / 2 in the window, time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for points in rows:
        lines.append(
            f"| {points[0]['k']:,} | {_median(points, 'ready'):,.0f} | "
            f"{_median(points, 'p50'):.2f} | {_median(points, 'p99'):.2f} | "
            f"{_median(points, 'max'):.1f} | {_median(points, 'count'):,.0f} | "
            f"{_median(points, 'kb_per_conn'):.1f} KB | "
            f"{_median(points, 'us_per_request'):.0f} µs | "
            f"{_median(points, 'others_cpu'):.0%} | {_gc_cell(points)} |"
        )
    return lines


def report(
    args: argparse.Namespace, bench: StreamBench, limits: tuple[int, int], results: Any
) -> str:
    """The markdown section: settings, limits, both tables."""
    streams, bursts, idle = results
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    lines = [
        f"## Streams and idle connections ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"{os.cpu_count()} vCPU {cpu}, Python {platform.python_version()}; gateway on core "
        f"{SERVER_CORE}, backend and clients on core {LOAD_CORE}; descriptor limit "
        f"{limits[0]} (hard {limits[1]}); gateway: {bench.cap_line or 'cap not logged'}.",
        f"Command: `python benchmarks/streams.py {' '.join(sys.argv[1:])}`; {args.rate:g} "
        f"events/s over all streams, {args.seconds:g} s measured after {args.warmup:g} s, "
        f"medians of {args.rounds} rounds.",
        "",
    ]
    if streams:
        base = statistics.median(p["gateway"]["base_mb"] for row in streams for p in row)
        lines += ["### Added delay against open SSE streams", "", *stream_table(streams), ""]
        lines += [f"The gateway's resident memory before any stream: {base:.0f} MB.", ""]
    if bursts:
        lines += ["### Streams while more open", "", *burst_table(bursts, args.burst), ""]
    if idle:
        lines += ["### Active requests against idle connections", "", *idle_table(idle), ""]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, nargs="*", default=list(STREAMS))
    parser.add_argument("--idle", type=int, nargs="*", default=list(IDLE))
    parser.add_argument("--rate", type=float, default=2_000, help="events/s over all streams")
    parser.add_argument("--seconds", type=float, default=10, help="measured per point")
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--burst", type=int, default=0, help="also: each N while this many more streams open"
    )
    parser.add_argument("--gateway-flag", action="append", default=[], help="extra serve flag")
    parser.add_argument("--output", default=None, help="also write the section to this file")
    return parser


def main() -> int:
    """Run every point, print the markdown section (and write it with --output)."""
    args = _parser().parse_args()
    # Stopped early, the `finally` blocks still stop every process started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    args.gateway_flag = [part for flag in args.gateway_flag for part in flag.split("=", 1)]
    limits = raise_nofile()
    bench = StreamBench(args)
    text = report(args, bench, limits, bench.run())
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
