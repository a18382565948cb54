"""Steady load at fixed rates: each kind of operation started on its own clock (open loop, so a
slow answer does not slow the load down), and real `mcp` SDK client sessions calling tools on
the Broker route and streaming a progress-reporting tool on the federated route. A session
whose call fails is closed and opened again (a reconnect), as an application would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx2
from ha_broker import BrokerLoad
from ha_record import Record, Recorder
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

CALL_TIMEOUT = 30.0
STREAM_STEPS = 50  # progress events of each streamed call (`count`, 10 ms apart)


@dataclass
class Rates:
    """Operations started per second, by kind."""

    sign_ins: float = 0.5
    refreshes: float = 16.0
    races: float = 0.2
    revokes: float = 0.2
    probes: float = 0.5
    tool_calls: float = 8.0


async def _guarded(recorder: Recorder, name: str, op: Callable[[], Awaitable[object]]) -> None:
    try:
        await op()
    except Exception as exc:  # the benchmark's own error: reported, never hidden
        recorder.finding(f"benchmark: {name} raised {type(exc).__name__}: {exc}")


async def paced(
    rate: float,
    stop: asyncio.Event,
    recorder: Recorder,
    name: str,
    op: Callable[[], Awaitable[object]],
) -> None:
    """Start `op` `rate` times a second until `stop`, then wait for the ones in flight."""
    if rate <= 0:
        return
    loop = asyncio.get_running_loop()
    started, n = loop.time(), 0
    running: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        n += 1
        task = asyncio.create_task(_guarded(recorder, name, op))
        running.add(task)
        task.add_done_callback(running.discard)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, started + n / rate - loop.time()))
    await asyncio.gather(*running)


async def broker_load(load: BrokerLoad, rates: Rates, stop: asyncio.Event) -> None:
    """Every Broker operation at its rate until `stop`."""
    recorder = load.sender.recorder
    kinds: list[tuple[float, str, Callable[[], Awaitable[object]]]] = [
        (rates.sign_ins, "sign-in", load.sign_in),
        (rates.refreshes, "refresh", load.refresh),
        (rates.races, "race", load.race),
        (rates.revokes, "revoke", load.revoke),
        (rates.probes, "revoked probe", load.probe_revoked),
        (rates.tool_calls, "tool call", load.tool_call),
    ]
    await asyncio.gather(*(paced(rate, stop, recorder, name, op) for rate, name, op in kinds))


@dataclass
class McpClient:
    """One application's `mcp` SDK client: a session on `url` calling `tool` every `period`
    seconds until stopped, opened again whenever a call fails."""

    name: str
    url: str
    token: str
    tool: str
    arguments: dict[str, int]
    period: float
    recorder: Recorder
    reconnects: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Call until `stop`; every failure recorded and followed by a new session."""
        while not stop.is_set():
            try:
                await self._session(stop)
            except Exception as exc:  # the SDK's errors (and groups of them) alike
                self._record("session", 0.0, "error", f"{type(exc).__name__}: {exc}"[:300])
            if not stop.is_set():
                self.reconnects += 1
                self.recorder.count("mcp sessions opened again")

    async def _session(self, stop: asyncio.Event) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT) as http,
            streamable_http_client(self.url, http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            started = self.recorder.now()
            async with asyncio.timeout(CALL_TIMEOUT):
                await session.initialize()
            self._record("initialize", started, "ok")
            while not stop.is_set():
                await self._call(session)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.period)

    async def _call(self, session: ClientSession) -> None:
        seen_at: list[float] = []

        async def seen(progress: float, total: float | None, message: str | None) -> None:
            seen_at.append(progress)

        started = self.recorder.now()
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                result = await session.call_tool(self.tool, self.arguments, progress_callback=seen)
        except TimeoutError:
            self._record("tools/call", started, "hang", f"no result in {CALL_TIMEOUT:.0f} s")
            raise
        except Exception as exc:
            self._record("tools/call", started, "error", f"{type(exc).__name__}: {exc}"[:300])
            raise
        outcome, detail = _judged(result, self.arguments.get("n"), len(seen_at))
        self._record("tools/call", started, outcome, detail)

    def _record(self, step: str, started: float, outcome: str, detail: str = "") -> None:
        kind = "mcp stream" if "n" in self.arguments else "mcp tool call"
        if step != "tools/call":
            kind = "mcp session"
        end = self.recorder.now()
        self.recorder.add(Record(kind, step, self.name, started or end, end, 0, outcome, detail))


def _judged(result: object, steps: int | None, seen: int) -> tuple[str, str]:
    """A tool call's outcome: its result is not an error and, for a stream, every progress
    event arrived."""
    if not isinstance(result, CallToolResult) or result.is_error:
        return "error", f"the tool answered an error: {str(result)[:200]}"
    if steps is not None and seen != steps:
        return "error", f"stream incomplete: {seen} of {steps} progress events"
    return "ok", ""


def mcp_clients(
    mcp: str, fed: str, tokens: list[str], recorder: Recorder, per_route: int
) -> list[McpClient]:
    """`per_route` clients calling `add` on the Broker route and as many streaming `a_count`
    (progress events) on the federated route, each with its own user's token."""
    clients = []
    for n in range(per_route):
        token = tokens[n % len(tokens)]
        clients.append(McpClient(f"tools-{n}", mcp, token, "add", {"a": 2, "b": 3}, 0.5, recorder))
        clients.append(
            McpClient(f"stream-{n}", fed, token, "a_count", {"n": STREAM_STEPS}, 0.5, recorder)
        )
    return clients
