"""Instructions per request (valgrind's callgrind), a measure a busy machine does not disturb:
the gateway runs under callgrind, a fixed number of requests is sent after a warm-up, and the
instructions executed between the two are divided by the requests.

    python benchmarks/instructions.py            # scenario b: one token
    python benchmarks/instructions.py --new-tokens   # scenario c: a new token per request

Needs valgrind (Debian package). Counts are user-space instructions only (no kernel time), and
OpenSSL may take other code paths under valgrind than on the bare CPU: compare the gateway with
itself, before and after a change, not with other servers.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import run
from run import Bench

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


def main() -> int:
    """Measure and print instructions per request."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--new-tokens", action="store_true", help="scenario c")
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument(
        "--top", type=int, default=0, help="also print the N costliest functions (self cost)"
    )
    args = parser.parse_args()
    options = argparse.Namespace(
        smoke=True, rounds=1, duration=1, warmup=1, conns=64, tokens=10, rate_seconds=1, soak=0
    )
    bench = Bench(options)
    count = args.requests
    tokens = [bench.mint(i) for i in range(count + 200)] if args.new_tokens else [bench.token]
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    spawn, wait_port = bench.spawn, run.wait_port
    run.wait_port = lambda port, timeout=20: wait_port(port, 600)  # start-up under valgrind

    def under_valgrind(name, cmd, core, port, env=None):  # noqa: ANN001, ANN202
        if name == "gateway":
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p", *cmd]
        return spawn(name, cmd, core, port, env)

    bench.spawn = under_valgrind  # type: ignore[method-assign]
    try:
        backend = bench.backend(run.LOAD_CORE)
        gateway = bench.gateway(backend.port)
        warm = tokens[count:] if args.new_tokens else tokens
        asyncio.run(load(gateway.port, warm, 200, args.conns))
        pid = str(gateway.popen.pid)
        subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
        failed = asyncio.run(load(gateway.port, tokens, count, args.conns))
        subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
    finally:
        bench.stop_all()
    total = 0
    for dump in out.parent.glob(out.name + "*"):
        text = dump.read_text()
        if "Trigger: dump" in text:
            found = re.search(r"^summary: (\d+)", text, re.M)
            total += int(found.group(1)) if found else 0
            if args.top:
                print(annotate(dump, args.top))
    scenario = "c (a new token per request)" if args.new_tokens else "b (one token)"
    print(
        f"scenario {scenario}: {total / count / 1000:.1f} k instructions per request "
        f"({count} requests, {failed} not 200)"
    )
    return 0 if failed == 0 and total else 1


if __name__ == "__main__":
    sys.exit(main())
