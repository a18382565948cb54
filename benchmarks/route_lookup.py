"""Micro-benchmark: the time to find a request's route among R routes, in process.

Before: the linear walk of the precedence-ordered table (first match wins), as the gateway did
until the route index. After: `RouteTable.match` over the index built with the table. Each R
(routes `/r0` … on one listener, half of them with a hostname of their own) is timed for the
first route and the last one, and the index's build time is shown (paid once per snapshot).
Usage: python benchmarks/route_lookup.py [R ...]"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from mcp_oauth_gateway.asgi import Receive, Scope, Send
from mcp_oauth_gateway.controlplane.snapshot import CompiledRoute
from mcp_oauth_gateway.dataplane.routing import RouteEntry, RouteTable

SIZES = (10, 100, 1_000, 5_000, 10_000)


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """Never called: only the lookup is timed."""


def routes(count: int) -> list[CompiledRoute]:
    """`count` PathPrefix routes; the odd ones also name a host of their own."""
    return [
        CompiledRoute(
            f"default/r{i}",
            0,
            "PathPrefix",
            f"/r{i}",
            (f"h{i}.example.com",) if i % 2 else (),
            None,
            None,
            30.0,
            None,
        )
        for i in range(count)
    ]


def linear(table: Sequence[CompiledRoute], host: str, path: str) -> CompiledRoute | None:
    """The walk the route index replaced: prefix by whole path elements, then the hostnames."""
    name = host.rsplit(":", 1)[0].lower()
    for route in table:
        prefix = route.match_value.rstrip("/")
        if path != prefix and not path.startswith(prefix + "/"):
            continue
        if not route.hostnames or name in route.hostnames:
            return route
    return None


def per_call(call: Callable[[], object], budget: float = 0.2) -> float:
    """Microseconds per call, repeated for about `budget` seconds (best of three batches)."""
    n = 1
    while True:
        started = time.perf_counter()
        for _ in range(n):
            call()
        elapsed = time.perf_counter() - started
        if elapsed > budget / 3 or n > 1_000_000:
            break
        n *= 4
    best = elapsed
    for _ in range(2):
        started = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, time.perf_counter() - started)
    return best / n * 1e6


def measure(count: int) -> dict[str, float]:
    """Lookup times (µs) of the first and last route, before and after; build time (ms)."""
    compiled = routes(count)
    started = time.perf_counter()
    table = RouteTable([RouteEntry(route, _app) for route in compiled])
    build_ms = (time.perf_counter() - started) * 1e3
    last = count - 1
    host = f"h{last}.example.com:8080" if last % 2 else "gw.example.com"
    early, late = ("gw.example.com", "/r0/mcp"), (host, f"/r{last}/mcp")
    assert linear(compiled, *late) is compiled[last]
    found = table.match(*late)
    assert found is not None
    assert found.route is compiled[last]
    return {
        "before early": per_call(lambda: linear(compiled, *early)),
        "before late": per_call(lambda: linear(compiled, *late)),
        "after early": per_call(lambda: table.match(*early)),
        "after late": per_call(lambda: table.match(*late)),
        "build ms": build_ms,
    }


def main(argv: Sequence[str]) -> None:
    """Print a Markdown table of lookup time against R."""
    sizes = [int(a) for a in argv] or list(SIZES)
    print(
        "| R | before, first route µs | before, last route µs | after, first µs "
        "| after, last µs | index build ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for count in sizes:
        m = measure(count)
        print(
            f"| {count:,} | {m['before early']:.2f} | {m['before late']:.1f} "
            f"| {m['after early']:.2f} | {m['after late']:.2f} | {m['build ms']:.1f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
