"""A rolling restart under load (issue 37): N gateway processes behind a loopback TCP load
balancer (`tests/loadbalancer_support.py`), sharing one Redis, serving a Broker route and a
federated route, under the same load as redis_failover.py: sign-ins, refresh rotations,
revocations, tool calls, and `mcp` SDK client sessions (tool calls on the Broker route,
progress streams on the federated one). One by one each replica is taken out of the load
balancer and sent SIGTERM (as Kubernetes does both at once), waited for, started again on its
port and put back once it serves; `--settle` seconds pass between steps.

Reported, never asserted: requests by outcome (every error and hang is a failed call, a
finding), the SDK sessions opened again, each step's seconds (SIGTERM to exit: the drain;
start to serving), p50/p99 latency before, during and after the roll, and the Broker effects
checked once it is over (as in redis_failover.py).

    python benchmarks/rolling_restart.py                 # 3 replicas; JSON in results/
    python benchmarks/rolling_restart.py --replicas 2 --settle 2
    python benchmarks/rolling_restart.py --smoke         # a few seconds of load: checks it runs
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

import httpx
from ha_http import Front
from ha_parts import Process, free_port, stop_on_sigterm, wait_for_port
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
from ha_stack import Replica, Stack, start_stack


class Balancer(Protocol):
    """What the roll needs of a load balancer (tests/loadbalancer_support.LoadBalancer)."""

    def url(self, path: str = "") -> str: ...
    def add(self, port: int) -> None: ...
    def remove(self, port: int) -> None: ...


def load_balancer() -> Any:
    """A new (not yet started) loopback load balancer."""
    try:
        from loadbalancer_support import LoadBalancer
    except ImportError as exc:  # on the branch that brings it until it is merged
        raise SystemExit(
            "rolling_restart.py needs tests/loadbalancer_support.py (the loopback load balancer)"
        ) from exc
    return LoadBalancer()


def redis_server(running: ExitStack, logs: Path) -> str:
    """A redis-server on a free loopback port, no persistence: its URL."""
    port = free_port()
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    process = Process("redis", [*cmd, "--appendonly", "no"], logs)
    running.callback(process.stop)
    wait_for_port(port, process)
    return f"redis://127.0.0.1:{port}/0"


def roll_step(
    stack: Stack, balancer: Balancer, replica: Replica, recorder: Recorder
) -> dict[str, Any]:
    """Take `replica` out and send it SIGTERM, wait for its exit, start it again, put it back:
    the step's seconds and exit code."""
    assert replica.process is not None
    began = recorder.event(f"{replica.name} SIGTERM")
    balancer.remove(replica.port)
    stack.signal(replica, signal.SIGTERM)
    try:
        code = replica.process.popen.wait(timeout=120)
    except subprocess.TimeoutExpired:
        recorder.finding(f"{replica.name} did not exit within 120 s of SIGTERM")
        code = replica.process.stop()
    exited = recorder.event(f"{replica.name} exited")
    replica.process.stop()  # closes its log
    stack.start(replica)
    serving = recorder.event(f"{replica.name} serving again")
    balancer.add(replica.port)
    if code != 0:
        recorder.finding(f"{replica.name} exited with {code} after SIGTERM")
    return {
        "replica": replica.name,
        "drain s": round(exited - began, 3),
        "start s": round(serving - exited, 3),
        "step s": round(serving - began, 3),
        "exit code": code,
    }


async def drive(stack: Stack, balancer: Balancer, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, load, roll every replica, load on, stop, verify: the run's summary."""
    front = Front(stack.public, [("lb", stack.public)])
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    async with httpx.AsyncClient(limits=limits) as http:
        run = LoadRun(http, front, stack, args)
        await run.start()
        await asyncio.sleep(args.before)
        run.recorder.event("roll")
        steps = []
        for n, replica in enumerate(stack.replicas):
            if n:
                await asyncio.sleep(args.settle)
            steps.append(await asyncio.to_thread(roll_step, stack, balancer, replica, run.recorder))
        run.recorder.event("rolled")
        await asyncio.sleep(args.after)
        result = await run.finish("roll", "rolled")
    result["steps"] = steps
    result["mcp sessions opened again"] = sum(c.reconnects for c in run.clients)
    result["load balancer"] = {
        "forwarded": dict(getattr(balancer, "forwarded", {})),
        "refused": dict(getattr(balancer, "refused", {})),
        "unserved": getattr(balancer, "unserved", None),
    }
    return result


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    """One run with fresh servers; its results."""
    with tempfile.TemporaryDirectory(prefix="rolling-restart-") as tmp, ExitStack() as running:
        work = Path(tmp)
        (work / "logs").mkdir()
        redis_url = redis_server(running, work / "logs")
        balancer = running.enter_context(load_balancer())
        flags = ("--grace-period", str(args.grace_period))
        stack = start_stack(running, work, redis_url, args.replicas, balancer.url(), flags)
        for replica in stack.replicas:
            balancer.add(replica.port)
        print(
            f"[roll] {args.replicas} gateways; load for {args.before:.0f} s, then the roll",
            file=sys.stderr,
            flush=True,
        )
        try:
            return asyncio.run(drive(stack, balancer, args))
        finally:
            if args.keep_logs:
                keep = Path(args.keep_logs)
                keep.mkdir(parents=True, exist_ok=True)
                for log in (work / "logs").glob("*.log"):
                    (keep / log.name).write_bytes(log.read_bytes())


def step_lines(steps: list[dict[str, Any]]) -> list[str]:
    """Each roll step's seconds."""
    lines = [
        "| roll step | SIGTERM → exit s | start → serving s | step s | exit code |",
        "|---|---:|---:|---:|---:|",
    ]
    for step in steps:
        lines.append(
            f"| {step['replica']} | {step['drain s']:.2f} | {step['start s']:.2f} "
            f"| {step['step s']:.2f} | {step['exit code']} |"
        )
    return lines


def text(args: argparse.Namespace, result: dict[str, Any]) -> str:
    """The run as Markdown."""
    lines = [
        f"## Rolling restart: {args.replicas} gateways behind a load balancer "
        f"({args.before:.0f} s before, {args.settle:.0f} s between steps, "
        f"{args.after:.0f} s after; --grace-period {args.grace_period:g})",
        "",
        *outcome_lines(result["outcomes"]),
        "",
        *step_lines(result["steps"]),
        "",
        "SDK client sessions opened again after a failed call: "
        f"{result['mcp sessions opened again']}",
        "",
        *timing_lines(result, "first SIGTERM"),
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
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--before", type=float, default=15, help="seconds of load before the roll")
    parser.add_argument("--settle", type=float, default=5, help="seconds between roll steps")
    parser.add_argument("--after", type=float, default=15, help="seconds of load after the roll")
    parser.add_argument(
        "--grace-period", type=float, default=10, help="the gateways' --grace-period"
    )
    add_load_arguments(parser)
    return parser


def main() -> int:
    """Roll, print the tables and write the JSON results."""
    args = _parser().parse_args()
    stop_on_sigterm()
    if args.smoke:
        args.replicas, args.before, args.settle, args.after = 2, 2, 0.5, 2
        args.sessions, args.mcp_clients, args.rate_scale, args.grace_period = 4, 1, 0.5, 3
    results: dict[str, Any] = {"benchmark": "rolling-restart", "machine": machine()}
    results["settings"] = {**vars(args), "rates": vars(rates(args))}
    results["run"] = run_once(args)
    print(text(args, results["run"]), flush=True)
    name = "rolling-restart" + ("-smoke" if args.smoke else "")
    path = write_json(name, results, Path(args.output))
    print(f"[roll] results written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
