"""From outside: req/s and p99 of a request to the first and to the last of R routes, with wrk
against a real gateway process (one core) in front of the static backend (issue 29, item 1, as
a tester measures it: the route table must not cost more for a late route).

Each of the R routes is an HTTPRoute (`/r{i}`), a GatewayPolicy (JWT against the run's inline
keyset, a CEL rule of its own) and a GatewayBackend, all on one listener, one file per route.
For each R: the gateway is started on the directory (the time until it listens is reported
too), then wrk runs against `/r0/mcp` and `/r{R-1}/mcp` in turn, `--rounds` times each; the
report takes the median round.

Usage: python benchmarks/route_curve.py [--seconds S] [--conns C] [--rounds N] [R ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from configs import route_yaml
from processes import PY, SERVER_CORE, free_port
from scenarios import Bench

SIZES = (10, 1_000, 5_000)


def write_routes(directory: Path, port: int, backend: int, jwks: str, count: int) -> None:
    """The Gateway on `port` and `count` routes to `backend`, one file each."""
    directory.mkdir(parents=True, exist_ok=True)
    gateway = f"""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
"""
    (directory / "gateway.yaml").write_text(gateway)
    inline = "{inline: '" + jwks + "'}"
    for i in range(count):
        rule = f'"mcp-agent" in jwt.groups || "team-{i}" in jwt.groups'
        (directory / f"route-{i:05d}.yaml").write_text(route_yaml(i, backend, inline, rule))


def curve_point(bench: Bench, backend: int, count: int, args: argparse.Namespace) -> dict:
    """One R: start-up seconds, and the median round's req/s and p99 for each route."""
    port = free_port()
    jwks = json.dumps({"keys": [bench.key.as_dict(private=False)]})
    directory = bench.work / f"routes-{count}"
    write_routes(directory, port, backend, jwks, count)
    started = time.monotonic()
    cmd = [PY, "-m", "mcp_oauth_gateway", "serve", "-f", str(directory)]
    gateway = bench.spawn(f"gateway-{count}", cmd, SERVER_CORE, port)
    startup = time.monotonic() - started
    point: dict = {"routes": count, "startup_s": startup}
    try:
        for which, index in (("first", 0), ("last", count - 1)):
            url = f"http://127.0.0.1:{port}/r{index}/mcp"
            rounds = [
                bench.wrk(url, args.conns, args.seconds, token=bench.token)
                for _ in range(args.rounds)
            ]
            rates = [r[0] for r in rounds]
            median = rounds[rates.index(statistics.median_low(rates))]
            errors = sum(r[4] for r in rounds)
            point[which] = {"rps": median[0], "p99_ms": median[2], "errors": errors}
    finally:
        gateway.stop()
    return point


def main(argv: Sequence[str]) -> None:
    """Measure each R given (default: 10, 1,000, 5,000) and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    bench = Bench(args)
    try:
        backend = bench.backend(SERVER_CORE).port
        points = [curve_point(bench, backend, count, args) for count in args.sizes]
    finally:
        bench.stop_all()
    print(
        "| R | start-up s | first route req/s | p99 ms | last route req/s | p99 ms | errors |\n"
        "|---:|---:|---:|---:|---:|---:|---:|"
    )
    for p in points:
        first, last = p["first"], p["last"]
        print(
            f"| {p['routes']:,} | {p['startup_s']:.1f} | {first['rps']:,.0f} | "
            f"{first['p99_ms']:.1f} | {last['rps']:,.0f} | {last['p99_ms']:.1f} | "
            f"{first['errors'] + last['errors']} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
