"""Beside the peers: our gateway, mcp-proxy (the Rust MCP proxy from crates.io) and HAProxy
`jwt_verify`, each alone on one core in front of the same MCP backend, doing the same work: a
JSON-RPC `tools/call` with an RS256 JWT (issuer, audience, expiry, signature) and a tool rule
(the caller's group may call this tool), in an MCP session opened through the proxy.

    python benchmarks/peers.py                  # 3 interleaved rounds, about 7 minutes
    python benchmarks/peers.py --quick          # one short round, about a minute
    python benchmarks/peers.py --smoke --proxies gateway,haproxy   # seconds: checks it runs

Before anything is measured, every round checks that each proxy serves the allowed call and
refuses a request with no token, bad tokens, a caller outside the group and the forbidden tool
(`peer_checks.py`), and stops if one does not. mcp-proxy is installed with cargo when missing.
The report (benchmarks/results/DATE-peers.md) gives req/s, p50, p99 and CPU µs per request of
each proxy at 1, 16 and 512 connections.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

from measurements import Result, median_results, middle
from peer_checks import ALLOWED, enforce, open_session
from peer_report import peers_report
from peer_servers import VARIANTS, PeerBench, installed_version, mcp_proxy_binary
from processes import HERE

Cells = dict[str, dict[str, str]]


def _parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one round of 2 s runs")
    parser.add_argument("--smoke", action="store_true", help="one round of 1 s runs, no warm-up")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--conns", default="1,16,512", help="connection counts (default 1,16,512)")
    parser.add_argument(
        "--proxies",
        default="gateway,mcp-proxy,haproxy",
        help="which to measure (default gateway,mcp-proxy,haproxy)",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=2000,
        help="tokens the gateway's new-token-per-request row cycles through; the gateway "
        "remembers half as many, so every one is a cache miss (default 2000)",
    )
    parser.add_argument("--mcp-proxy", help="an mcp-proxy binary to use instead of installing")
    parser.add_argument("--output", default=str(HERE / "results"))
    return parser


def _settings(args: argparse.Namespace) -> argparse.Namespace:
    """The modes' settings, and the lists read from their comma-separated flags."""
    if args.quick:
        args.rounds, args.duration, args.warmup = 1, 2, 1
    if args.smoke:
        args.rounds, args.duration, args.warmup, args.tokens = 1, 1, 0, 200
    args.conns = [int(c) for c in args.conns.split(",")]
    args.proxies = [p.strip() for p in args.proxies.split(",")]
    unknown = set(args.proxies) - set(VARIANTS)
    if unknown:
        raise SystemExit(
            f"error: --proxies names {', '.join(sorted(unknown))}: choose among "
            f"{', '.join(VARIANTS)}"
        )
    return args


def run_round(bench: PeerBench, index: int, tokens: Path) -> tuple[list[Result], Cells]:
    """One round: the processes started, every proxy checked, then each variant loaded at each
    connection count in turn (the order shifted by one each round), and everything stopped."""
    args = bench.args
    try:
        backend, started = bench.start(args.proxies, cache=args.tokens // 2)
        targets = [target for _, target in started.values()]
        sessions = {t.name: open_session(t, t.token) for t in targets}
        cells, failures = enforce(targets, bench, sessions, backend.port)
        if failures:
            raise SystemExit(
                "error: a proxy does not enforce what it must; nothing was measured:\n  "
                + "\n  ".join(failures)
            )
        variants = [v for name in args.proxies for v in VARIANTS[name]]
        shift = index % len(variants)
        out = []
        for conns in args.conns:
            for variant in variants[shift:] + variants[:shift]:
                server, target = started[variant.proxy]
                lua = {
                    "TOOL": target.prefix + ALLOWED,
                    "SESSION": sessions[target.name],
                    "CHECK_RESULT": "1",
                }
                result = bench.measure(
                    f"{variant.label}|{conns}",
                    f"http://127.0.0.1:{target.port}{target.path}",
                    server,
                    conns,
                    token=None if variant.many_tokens else target.token,
                    tokens=tokens if variant.many_tokens else None,
                    also=backend,
                    lua=lua,
                )
                result.extra["conns"] = conns
                out.append(result)
    finally:
        bench.stop_all()
    return out, cells


def medians(rounds: list[list[Result]]) -> list[Result]:
    """Per row, the round of median req/s, with the median CPU per request over the rounds,
    its range, and the errors of every round."""
    chosen = median_results(rounds)
    for result in chosen:
        same = [r for done in rounds for r in done if r.scenario == result.scenario]
        cpus = [r.cpu_us for r in same]
        result.extra["median_cpu_us"] = cpus[middle(cpus)]
        result.extra["min_cpu_us"], result.extra["max_cpu_us"] = min(cpus), max(cpus)
        result.extra["all_errors"] = sum(r.errors for r in same)
    return chosen


def main() -> int:
    """Check, measure, and write the report."""
    args = _settings(_parser().parse_args())
    for tool in ("wrk", "haproxy") if "haproxy" in args.proxies else ("wrk",):
        if not shutil.which(tool):
            print(f"error: {tool} is required (apt-get install wrk haproxy)", file=sys.stderr)
            return 2
    binary = mcp_proxy_binary(args.mcp_proxy) if "mcp-proxy" in args.proxies else None
    args.load_start = os.getloadavg()[0]
    bench = PeerBench(args, binary)
    print(f"[peers] minting {args.tokens} tokens", file=sys.stderr, flush=True)
    tokens = bench.tokens_file(args.tokens)
    rounds, cells = [], {}
    for i in range(args.rounds):
        print(f"[peers] round {i + 1}/{args.rounds}", file=sys.stderr, flush=True)
        done, cells = run_round(bench, i, tokens)
        rounds.append(done)
    version = f"{installed_version(binary)} ({binary})" if binary else None
    text = peers_report(args, medians(rounds), cells, version)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    mode = "-smoke" if args.smoke else "-quick" if args.quick else ""
    path = out / f"{datetime.now(UTC).strftime('%Y-%m-%d-%H%M')}-peers{mode}.md"
    path.write_text(text)
    print(text)
    print(f"[peers] report written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
