"""Redis failover under load (issue 37): N gateway processes sharing a Sentinel set (a primary,
two replicas, three sentinels: Debian's redis-server on loopback), a Broker route in front of
the benchmark's `mcp` SDK server and a federated route in front of two more, under steady
sign-ins, refresh rotations, one refresh token sent to two replicas at once, revocations,
tool calls and `mcp` SDK client sessions (tool calls, and progress streams on the federated
route). Mid-run the primary is killed (SIGKILL, `kill`), or hung (SIGSTOP, then SIGCONT once the
sentinels have promoted a replica and `--hold` seconds more: `stop`), or killed at the worst
moment for refreshes (`mid-refresh`: the provider is held half a second first, so every refresh
in flight has claimed its token and waits there; it is let go 0.2 s after the kill).

Reported, never asserted: requests by outcome (ok, 503 with Retry-After, any other error, a
hang: every error and hang is a finding), the seconds from the fault to the first 503, to the
first success and to the last failure (the steady success rate back), p50/p99 latency before,
during and after, and the effects checked once it is over: refresh tokens answered 200 (or
503, "nothing changed") that no longer work (lost), tokens rotated away or revoked that are
accepted again (duplicated, revoked accepted).

    python benchmarks/redis_failover.py                 # each fault in turn; JSON in results/
    python benchmarks/redis_failover.py --fault kill --before 5 --after 15
    python benchmarks/redis_failover.py --smoke         # a few seconds of load: checks it runs
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from ha_http import Front
from ha_parts import SENTINEL_PASSWORD, SERVICE, SentinelSet, sentinel_set, stop_on_sigterm
from ha_record import Recorder
from ha_report import (
    effect_lines,
    finding_lines,
    latency_lines,
    machine,
    outcome_lines,
    timing_lines,
    write_json,
)
from ha_run import LoadRun, add_load_arguments, rates
from ha_stack import Stack, start_stack
from redis.sentinel import Sentinel

# How each fault is done to the primary; `mid-refresh` kills it while the provider holds
# every refresh in flight, each having claimed its refresh token (the worst moment).
FAULTS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "mid-refresh": signal.SIGKILL}
NAMES = {
    "kill": "the primary killed (SIGKILL)",
    "stop": "the primary hung (SIGSTOP, SIGCONT after the promotion)",
    "mid-refresh": "the primary killed while the refreshes in flight wait at the provider",
}
# Seconds the provider is held before the kill (refreshes pile up, their tokens claimed) and
# after it (their rotations then meet the dead primary).
HELD_BEFORE, HELD_AFTER = 0.5, 0.2


def primary_port(sentinels: SentinelSet) -> int | None:
    """The primary's port as the sentinels name it now (None when none answers)."""
    watcher = Sentinel(
        [("127.0.0.1", p) for p in sentinels.sentinel_ports],
        sentinel_kwargs={"password": SENTINEL_PASSWORD, "socket_timeout": 0.5},
    )
    try:
        return int(watcher.discover_master(SERVICE)[1])
    except Exception:  # no sentinel answers yet: ask again
        return None


def inject(
    stack: Stack, sentinels: SentinelSet, fault: str, hold: float, recorder: Recorder
) -> None:
    """The fault: the primary killed (at the worst moment for `mid-refresh`), or stopped
    until a replica is promoted and `hold` more seconds; notes when the sentinels name the
    new primary."""
    pid = sentinels.primary.popen.pid
    provider = stack.servers["dev-idp"].popen.pid
    if fault == "mid-refresh":
        os.kill(provider, signal.SIGSTOP)
        recorder.event("provider held")
        time.sleep(HELD_BEFORE)
    recorder.event("fault")
    os.kill(pid, FAULTS[fault])
    if fault == "mid-refresh":
        time.sleep(HELD_AFTER)
        os.kill(provider, signal.SIGCONT)
        recorder.event("provider resumed")
    wait_promoted(sentinels, recorder)
    if fault == "stop":
        time.sleep(hold)
        os.kill(pid, signal.SIGCONT)
        recorder.event("resumed")


def wait_promoted(sentinels: SentinelSet, recorder: Recorder) -> None:
    """Until the sentinels name another primary (noted as the event `promoted`)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        port = primary_port(sentinels)
        if port is not None and port != sentinels.primary_port:
            recorder.event("promoted")
            return
        time.sleep(0.05)
    recorder.finding("the sentinels named no new primary within 60 s")


async def drive(
    stack: Stack, sentinels: SentinelSet, fault: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Warm up, load, inject the fault, load on, stop, verify: the run's summary."""
    front = Front(stack.public, [(r.name, r.base) for r in stack.replicas])
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    async with httpx.AsyncClient(limits=limits) as http:
        run = LoadRun(http, front, stack, args)
        await run.start()
        await asyncio.sleep(args.before)
        await asyncio.to_thread(inject, stack, sentinels, fault, args.hold, run.recorder)
        left = args.after - (run.recorder.now() - run.recorder.events["fault"])
        await asyncio.sleep(max(0.0, left))
        result = await run.finish("fault")
    result["mcp sessions opened again"] = sum(c.reconnects for c in run.clients)
    return result


def run_once(fault: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run with fresh servers; its results."""
    with tempfile.TemporaryDirectory(prefix="redis-failover-") as tmp, ExitStack() as running:
        work = Path(tmp)
        (work / "logs").mkdir()
        sentinels = running.enter_context(sentinel_set(work / "logs", work / "redis", replicas=2))
        print(
            f"[failover] Sentinel set up; starting {args.replicas} gateways",
            file=sys.stderr,
            flush=True,
        )
        stack = start_stack(running, work, sentinels.url, args.replicas)
        print(
            f"[failover] load for {args.before:.0f} s, then {NAMES[fault]}",
            file=sys.stderr,
            flush=True,
        )
        result = asyncio.run(drive(stack, sentinels, fault, args))
        if args.keep_logs:
            keep = Path(args.keep_logs) / fault
            keep.mkdir(parents=True, exist_ok=True)
            for log in (work / "logs").glob("*.log"):
                (keep / log.name).write_bytes(log.read_bytes())
    return result


def text(fault: str, args: argparse.Namespace, result: dict[str, Any]) -> str:
    """The run as Markdown."""
    name = NAMES[fault]
    lines = [
        f"## Redis failover: {name} ({args.replicas} gateways, "
        f"{args.before:.0f} s before, {args.after:.0f} s after)",
        "",
        *outcome_lines(result["outcomes"]),
        "",
        *timing_lines(result, "fault"),
        "",
        *latency_lines(result["latency"]),
        "",
        *effect_lines(result["effects"]),
        "",
        *finding_lines(result["findings"]),
    ]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fault", choices=[*FAULTS, "all"], default="all")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--before", type=float, default=20, help="seconds of load before the fault")
    parser.add_argument("--after", type=float, default=40, help="seconds of load from the fault on")
    parser.add_argument(
        "--hold", type=float, default=5, help="SIGSTOP: seconds hung after the promotion"
    )
    add_load_arguments(parser)
    return parser


def main() -> int:
    """Run each fault, print the tables and write the JSON results."""
    args = _parser().parse_args()
    stop_on_sigterm()
    if args.smoke:
        args.before, args.after, args.hold, args.sessions, args.mcp_clients = 2, 4, 1, 4, 1
        args.rate_scale = 0.5
    faults = list(FAULTS) if args.fault == "all" else [args.fault]
    results: dict[str, Any] = {"benchmark": "redis-failover", "machine": machine(), "runs": {}}
    results["settings"] = {**vars(args), "rates": vars(rates(args))}
    for fault in faults:
        result = run_once(fault, args)
        results["runs"][fault] = result
        print(text(fault, args, result), flush=True)
    path = write_json(
        "redis-failover" + ("-smoke" if args.smoke else ""), results, Path(args.output)
    )
    print(f"[failover] results written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
