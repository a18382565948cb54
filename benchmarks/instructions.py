"""Instructions per request (valgrind's callgrind), a measure a busy machine does not disturb:
the gateway runs under callgrind, a fixed number of requests is sent after a warm-up, and the
instructions executed between the two are divided by the requests.

    python benchmarks/instructions.py            # scenario b: one token
    python benchmarks/instructions.py --new-tokens   # scenario c: a new token per request

    python benchmarks/instructions.py --stage "tool authorization"   # with an optional stage on
    python benchmarks/instructions.py --cache-sim    # and simulated cache misses per request
    python benchmarks/instructions.py --haproxy --cache-sim   # the same for HAProxy jwt_verify
    python benchmarks/instructions.py --no-policy    # plain forwarding: the route without a policy
    python benchmarks/instructions.py --floor        # the HTTP server alone: a static ASGI app
    python benchmarks/instructions.py --floor --gateway-protocol   # on the gateway's protocol

Needs valgrind (Debian package). Counts are user-space instructions only (no kernel time), and
OpenSSL may take other code paths under valgrind than on the bare CPU (HAProxy links the
system's OpenSSL, the gateway the one in `cryptography`): compare instruction counts of the
gateway with itself, before and after a change. Cache misses (`--cache-sim`: the host's L1
caches, and a 1 MB last level standing for one core's share of a shared cache) say how much
memory a request touches, which is what a busy neighbour makes slower.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import processes
import servers
from configs import STAGES
from processes import LOAD_CORE
from scenarios import Bench
from servers import Server

BODY = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
    b'"params":{"name":"add","arguments":{"a":2,"b":3}}}'
)


def request(port: int, token: str) -> bytes:
    """The scenario's POST, as wrk sends it (post.lua)."""
    return (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s"
    ) % (port, token.encode(), len(BODY), BODY)


async def connection(port: int, requests: list[bytes]) -> int:
    """Send the requests one after the other on one keep-alive connection; count non-200s."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    failed = 0
    for data in requests:
        writer.write(data)
        head = await reader.readuntil(b"\r\n\r\n")
        failed += not head.startswith(b"HTTP/1.1 200")
        length = re.search(rb"(?i)content-length: (\d+)", head)
        await reader.readexactly(int(length.group(1)) if length else 0)
    writer.close()
    return failed


async def load(port: int, tokens: list[str], count: int, conns: int) -> int:
    """`count` requests over `conns` connections, cycling through `tokens`."""
    requests = [request(port, tokens[i % len(tokens)]) for i in range(count)]
    done = await asyncio.gather(*(connection(port, requests[i::conns]) for i in range(conns)))
    return sum(done)


def annotate(dump: Path, top: int) -> str:
    """The `top` functions by their own instructions, from callgrind_annotate."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(dump)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line for line in text.splitlines() if re.match(r"^\s*[\d,]+ \(", line)]
    return "\n".join(rows[:top])


def _parser() -> argparse.ArgumentParser:
    """The command line: the scenario, the server measured and what to count."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--new-tokens", action="store_true", help="scenario c")
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument(
        "--top", type=int, default=0, help="also print the N costliest functions (self cost)"
    )
    parser.add_argument(
        "--cache-sim", action="store_true", help="also count simulated cache misses"
    )
    parser.add_argument(
        "--haproxy", action="store_true", help="measure HAProxy jwt_verify instead (scenario d)"
    )
    parser.add_argument(
        "--no-policy",
        action="store_true",
        help="the gateway's route without its GatewayPolicy (plain forwarding)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="measure the benchmark's backend instead: a static ASGI app on uvicorn (uvloop, "
        "httptools), what the HTTP server alone costs",
    )
    parser.add_argument(
        "--gateway-protocol",
        action="store_true",
        help="with --floor: the static app on the gateway's protocol (connections.py) instead "
        "of uvicorn's own",
    )
    parser.add_argument(
        "--stage",
        choices=("plain", *STAGES, "all"),
        default="plain",
        help="the gateway with this optional stage on (as `run.py --stages` runs it)",
    )
    return parser


def main() -> int:
    """Measure and print instructions per request."""
    parser = _parser()
    args = parser.parse_args()
    if args.haproxy and args.new_tokens:
        parser.error("--haproxy measures one token (scenario d); drop --new-tokens")
    if args.gateway_protocol and not args.floor:
        parser.error("--gateway-protocol goes with --floor (the gateway always runs on it)")
    options = argparse.Namespace(
        smoke=True, rounds=1, duration=1, warmup=1, conns=64, tokens=10, rate_seconds=1, soak=0
    )
    bench = Bench(options)
    count = args.requests
    tokens = [bench.mint(i) for i in range(count + 200)] if args.new_tokens else [bench.token]
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    failed = _under_callgrind(bench, args, tokens, out)
    totals = summed_events(out)
    for dump in dumps(out):
        if args.top:
            print(annotate(dump, args.top))
    total = totals.get("Ir", 0)
    scenario = (
        "floor (a static ASGI app on the gateway's protocol)"
        if args.floor and args.gateway_protocol
        else "floor (a static ASGI app on uvicorn)"
        if args.floor
        else "d (HAProxy jwt_verify, one token)"
        if args.haproxy
        else "c (a new token per request)"
        if args.new_tokens
        else "b (one token)"
    ) + (", route without a policy" if args.no_policy else "")
    print(
        f"scenario {scenario}: {total / count / 1000:.1f} k instructions per request "
        f"({count} requests, {failed} not 200)"
    )
    if args.cache_sim:
        print(cache_line(totals, count))
    return 0 if failed == 0 and total else 1


def _under_callgrind(bench: Bench, args: argparse.Namespace, tokens: list[str], out: Path) -> int:
    """The measured server under callgrind: warm it up, zero the counts, send the requests and
    dump them into `out`.<pid>; the requests not answered 200."""
    count = args.requests
    spawn, wait_port = bench.spawn, processes.wait_port
    # Start-up under valgrind takes minutes, more on a busy machine.
    processes.wait_port = lambda port, timeout=20: wait_port(port, 1800)

    measured = "haproxy" if args.haproxy else "floor" if args.floor else "gateway"
    cache = ["--cache-sim=yes", "--LL=1048576,16,64"] if args.cache_sim else []
    tool = ["valgrind", "--tool=callgrind", *cache, f"--callgrind-out-file={out}.%p"]

    def under_valgrind(
        name: str, cmd: list[str], core: str, port: int, env: dict[str, str] | None = None
    ) -> Server:
        return spawn(name, [*tool, *cmd] if name == measured else cmd, core, port, env)

    bench.spawn = under_valgrind  # type: ignore[method-assign]
    try:
        backend = bench.backend(LOAD_CORE)
        if args.no_policy:
            servers.gateway_yaml = _without_policy(servers.gateway_yaml)
        if args.floor:
            port = processes.free_port()
            launcher = "protocol_floor.py" if args.gateway_protocol else "backend.py"
            command = [processes.PY, str(processes.HERE / launcher), str(port)]
            server = bench.spawn("floor", command, processes.SERVER_CORE, port)
        elif args.haproxy:
            server = bench.haproxy(backend.port)
        else:
            server = bench.gateway(backend.port, stage=args.stage)
        warm = tokens[count:] if args.new_tokens else tokens
        asyncio.run(load(server.port, warm, 200, args.conns))
        pid = str(server.popen.pid)
        subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
        failed = asyncio.run(load(server.port, tokens, count, args.conns))
        subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
    finally:
        bench.stop_all()
    return failed


def _without_policy(make: Callable[..., str]) -> Callable[..., str]:
    """`gateway_yaml` without the GatewayPolicy document: the route forwards unauthenticated."""

    def yaml(*args: object) -> str:
        documents = make(*args).split("---\n")
        return "---\n".join(d for d in documents if "kind: GatewayPolicy" not in d)

    return yaml


def dumps(out: Path) -> list[Path]:
    """The dumps taken on request (after the warm-up), one per process or thread."""
    return [d for d in out.parent.glob(out.name + "*") if "Trigger: dump" in d.read_text()]


def summed_events(out: Path) -> dict[str, int]:
    """Each event's total (Ir, and with --cache-sim the misses) over the dumps."""
    totals: dict[str, int] = {}
    for dump in dumps(out):
        text = dump.read_text()
        names = re.search(r"^events: (.+)$", text, re.M)
        values = re.search(r"^summary: (.+)$", text, re.M)
        if names and values:
            for name, value in zip(names.group(1).split(), values.group(1).split(), strict=False):
                totals[name] = totals.get(name, 0) + int(value)
    return totals


def cache_line(totals: dict[str, int], count: int) -> str:
    """Simulated cache misses per request: L1 instruction, L1 data, last level (1 MB)."""
    data = totals.get("D1mr", 0) + totals.get("D1mw", 0)
    last = sum(totals.get(name, 0) for name in ("ILmr", "DLmr", "DLmw"))
    return (
        f"  per request: {totals.get('I1mr', 0) / count:,.0f} L1 instruction misses, "
        f"{data / count:,.0f} L1 data misses, {last / count:,.1f} last-level (1 MB) misses"
    )


if __name__ == "__main__":
    sys.exit(main())
