"""One loaded run, shared by the failover and rolling-restart benchmarks: users signed in
first, then the Broker operations and the `mcp` SDK clients at their rates until stopped, then
every promise checked; the result is `ha_record.summary` with the checks' effects and
findings added."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from ha_broker import BrokerLoad
from ha_http import Front, Sender
from ha_load import McpClient, Rates, broker_load, mcp_clients
from ha_record import Recorder, summary
from ha_stack import Stack
from ha_verify import verify

WARM_UP_CONCURRENCY = 4
WARM_UP_TRIES = 30


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load's command-line settings, and where a run's results and logs go."""
    parser.add_argument("--sessions", type=int, default=40, help="users signed in before the load")
    parser.add_argument("--mcp-clients", type=int, default=2, help="SDK client sessions per route")
    parser.add_argument(
        "--rate-scale", type=float, default=1.0, help="every rate (ha_load.Rates) times this"
    )
    parser.add_argument("--output", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--keep-logs", default=None, help="copy every process's log here")
    parser.add_argument("--smoke", action="store_true", help="a few seconds; checks it runs")


def rates(args: argparse.Namespace) -> Rates:
    """The rates, scaled."""
    return Rates(**{k: v * args.rate_scale for k, v in vars(Rates()).items()})


class LoadRun:
    """The load of one run, through `front`."""

    def __init__(
        self, http: httpx.AsyncClient, front: Front, stack: Stack, args: argparse.Namespace
    ):
        self.http, self.front, self.stack, self.args = http, front, stack, args
        self.recorder = Recorder()
        self.load = BrokerLoad(Sender(http, front, self.recorder), stack.mcp)
        self.stop = asyncio.Event()
        self.clients: list[McpClient] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Sign the users in, then start the load (the recorder's clock starts with it)."""
        warm = BrokerLoad(Sender(self.http, self.front, Recorder()), self.stack.mcp)
        gate = asyncio.Semaphore(WARM_UP_CONCURRENCY)

        async def one() -> None:
            # A sign-in may meet the store before its replicas have caught up (503): again.
            async with gate:
                for _ in range(WARM_UP_TRIES):
                    if await warm.sign_in() is not None:
                        return
                    await asyncio.sleep(1)

        await asyncio.gather(*(one() for _ in range(self.args.sessions)))
        if len(warm.sessions) < self.args.sessions:
            raise SystemExit(
                f"{len(warm.sessions)} of {self.args.sessions} sign-ins succeeded before the "
                "run; see the logs (--keep-logs)"
            )
        self.load.sessions = warm.sessions
        self.recorder.started = time.monotonic()
        tokens = [s.access for s in warm.sessions]
        self.clients = mcp_clients(
            self.stack.mcp, self.stack.fed, tokens, self.recorder, self.args.mcp_clients
        )
        self._tasks = [asyncio.create_task(broker_load(self.load, rates(self.args), self.stop))]
        self._tasks += [asyncio.create_task(c.run(self.stop)) for c in self.clients]

    async def finish(self, start: str, end: str | None = None) -> dict[str, Any]:
        """Stop the load, wait for what is in flight, check every promise: the summary."""
        self.stop.set()
        await asyncio.gather(*self._tasks)
        self.recorder.event("load stopped")
        checks = Recorder()
        await verify(Sender(self.http, self.front, checks), self.load)
        result = summary(self.recorder, start, end)
        result["effects"] = {
            **result["effects"],
            **checks.effects,
            "sign-ins during the run": self.load.signed_in,
        }
        result["findings"]["count"] += len(checks.findings)
        result["findings"]["first"] += checks.findings[:20]
        result["checks"] = {"requests": len(checks.records)}
        return result
