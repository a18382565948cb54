"""The benchmark: the gateway against a direct backend and against HAProxy (the C ceiling) and
nginx, in one run on one machine, each server pinned to one core and the load on the other.

    python benchmarks/run.py            # the full run (several minutes), report in results/
    python benchmarks/run.py --smoke    # a few seconds: checks that everything runs

Scenarios: (a) static JSON backend, direct; (b) gateway (RS256 JWT + one CEL rule), one token;
(c) gateway with a different token per request (more tokens than the cache holds); (d) HAProxy
`jwt_verify` + claim checks, and nginx as a plain proxy; (e) gateway in front of a real `mcp` SDK
server doing tools/call (CPU per request, gateway vs backend); (f) SSE through the gateway vs
direct. Plus one-connection latency, added latency at a fixed 500 req/s, and RSS over a long run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from measurements import Result, median_results, round_ratios
from processes import HERE
from report import report, stage_lines
from scenarios import Bench


def _parser() -> argparse.ArgumentParser:
    """The command line: a full run, or --smoke, --quick or --stages."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="a few seconds; checks it runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--conns", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=12_000)
    parser.add_argument("--rate-seconds", type=float, default=10)
    parser.add_argument(
        "--soak", type=int, default=1_000_000, help="requests for the RSS check (0 to skip)"
    )
    parser.add_argument("--output", default=str(HERE / "results"))
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only the gateway scenarios, no report file (for tuning)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="only the optional stages' cost and the security checks, no report file",
    )
    return parser


def _stages_only(bench: Bench) -> int:
    """--stages: print the optional stages' cost and the security checks."""
    try:
        print("\n".join(stage_lines(bench.stage_costs(), bench.security_checks())))
    finally:
        bench.stop_all()
    return 0


def _quick(bench: Bench) -> int:
    """--quick: print the gateway's two target scenarios and HAProxy's, and their ratios."""
    try:
        results = bench.quick()
        for result in results:
            print(
                f"{result.scenario}: {result.rps:,.0f} req/s p50 {result.p50:.2f} ms "
                f"p99 {result.p99:.2f} ms, {result.cpu_us:.0f} µs/req"
            )
        if len(results) == 3:
            b, c, d = (r.rps for r in results)
            print(f"b/d {b / d:.2f}  c/d {c / d:.2f}")
    finally:
        bench.stop_all()
    return 0


def _measure_all(
    bench: Bench, args: argparse.Namespace
) -> tuple[list[Result], dict[str, Any], dict[str, float] | None]:
    """Every scenario of a full (or smoke) run: the results, the extras and the soak."""
    try:
        print(f"[bench] minting {args.tokens} tokens", file=sys.stderr, flush=True)
        bench.tokens_file(args.tokens)
        rounds = []
        for i in range(args.rounds):
            print(f"[bench] round {i + 1}/{args.rounds}", file=sys.stderr, flush=True)
            rounds.append(bench.run_round())
        ratios = round_ratios(rounds)
        results = median_results(rounds)
        print(
            "[bench] the mcp SDK server, alone and behind the gateway", file=sys.stderr, flush=True
        )
        share = bench.mcp_share()
        print("[bench] latency at 500 req/s and SSE", file=sys.stderr, flush=True)
        extras = bench.latency_and_sse()
        extras["round_ratios"] = ratios
        extras["stages"] = bench.stage_costs()
        extras["security"] = bench.security_checks()
        soak = None
        if args.soak:
            print(f"[bench] RSS over {args.soak:,} requests", file=sys.stderr, flush=True)
            soak = bench.soak()
    finally:
        bench.stop_all()
    return results + share, extras, soak


def _write(text: str, args: argparse.Namespace) -> None:
    """The report into --output (named for the day, `-smoke` for a smoke run) and stdout."""
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    name = datetime.now(UTC).strftime("%Y-%m-%d") + ("-smoke" if args.smoke else "") + ".md"
    (out / name).write_text(text)
    print(text)
    print(f"[bench] report written to {out / name}", file=sys.stderr)


def main() -> int:
    """Run and write the report."""
    args = _parser().parse_args()
    if args.smoke:
        # No warm-up: a smoke run's numbers mean nothing, and it runs in every `make test`.
        args.rounds, args.duration, args.warmup, args.tokens = 1, 1, 0, 200
        args.rate_seconds, args.soak = 1, 0
    for tool in ("wrk",):
        if not shutil.which(tool):
            print(
                f"error: {tool} is required (apt-get install wrk haproxy nginx-light)",
                file=sys.stderr,
            )
            return 2
    bench = Bench(args)
    if args.stages:
        return _stages_only(bench)
    if args.quick:
        return _quick(bench)
    results, extras, soak = _measure_all(bench, args)
    _write(report(args, results, extras, soak), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
