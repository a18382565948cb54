"""The processes `streams.py` starts around the gateway, on raw asyncio sockets (uvloop), so that
they cost little next to what they measure:

    backend PORT RATE           SSE streams (GET) at RATE events/s over all of them, spread
                                evenly in time; a static JSON result (POST)
    streams HOST PORT N TOKEN WARMUP SECONDS [SOURCE ...]
                                N SSE streams; prints a `ready` line, then the delay of every
                                event received during SECONDS (after WARMUP), and the losses
    idle HOST PORT K TOKEN [SOURCE ...]
                                K keep-alive connections, one POST each, then left idle;
                                prints `ready`, closes them when its standard input closes
    active HOST PORT TOKEN SECONDS
                                one connection doing sequential POSTs; the latencies
    gateway TRACE ARGS...       the gateway (`mcp_oauth_gateway ARGS`) with every garbage
                                collection timed, written as JSON to TRACE when it stops;
                                on SIGUSR1 it appends its tracked objects by type to
                                TRACE.census (what each open stream keeps)

Each event is `data: SEQ SENT_NS`, SENT_NS being CLOCK_MONOTONIC (one clock for every process
of the machine): its delay is the time it arrives at the client minus that.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import gc
import itertools
import json
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-store\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
RESULT = (
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"5"}],'
    b'"structuredContent":{"result":5},"isError":false}}'
)
JSON_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    % (len(RESULT), RESULT)
)
CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{}}}'
TICK = 0.001
# A closed socket resets (SO_LINGER 0) instead of lingering in TIME_WAIT: thousands of
# connections a round would otherwise exhaust the loopback's ephemeral ports.
RESET = struct.pack("ii", 1, 0)


def percentiles(values: list[int]) -> dict[str, float]:
    """p50, p99 and max of nanosecond values, in ms, and their count."""
    if not values:
        return {"count": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)
    n = len(ordered)
    return {
        "count": n,
        "p50": ordered[(n - 1) // 2] / 1e6,
        "p99": ordered[int(0.99 * (n - 1))] / 1e6,
        "max": ordered[-1] / 1e6,
    }


# --- the backend -------------------------------------------------------------------------------


class _Hub:
    """The open streams and the ticker that spreads RATE events a second over them."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.streams: list[_BackendConnection] = []
        self.next = 0
        self.sent = 0
        self.started = 0.0

    def tick(self) -> None:
        """Send the events due since the start, each to the next stream in turn."""
        loop = asyncio.get_running_loop()
        streams = self.streams
        due = int((loop.time() - self.started) * self.rate) - self.sent
        if not streams:
            self.sent += due
        for _ in range(due if streams else 0):
            if self.next >= len(streams):
                self.next = 0
            stream = streams[self.next]
            self.next += 1
            self.sent += 1
            payload = b"data: %d %d\n\n" % (stream.seq, time.monotonic_ns())
            stream.seq += 1
            stream.transport.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        loop.call_later(TICK, self.tick)


class _BackendConnection(asyncio.Protocol):
    def __init__(self, hub: _Hub) -> None:
        self.hub = hub
        self.buffer = b""
        self.seq = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            length = 0
            if b"content-length:" in head:
                length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            if head.startswith(b"get"):
                self.transport.write(SSE_HEAD)
                self.hub.streams.append(self)
            else:
                self.transport.write(JSON_RESPONSE)

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.hub.streams:
            self.hub.streams.remove(self)


async def backend(port: int, rate: float) -> None:
    """Serve until killed."""
    loop = asyncio.get_running_loop()
    hub = _Hub(rate)
    hub.started = loop.time()
    server = await loop.create_server(
        lambda: _BackendConnection(hub), "127.0.0.1", port, backlog=4096
    )
    hub.tick()
    await server.serve_forever()


# --- the clients -------------------------------------------------------------------------------


class _Totals:
    def __init__(self) -> None:
        self.recording = False
        self.delays: list[int] = []
        self.lost = 0
        self.broken = 0
        self.stopping = False
        # The longest delay and when (monotonic seconds) its event arrived.
        self.worst = (0, 0.0)


class _StreamClient(asyncio.Protocol):
    """One SSE stream: the response head, then `data: SEQ SENT_NS` lines."""

    def __init__(self, totals: _Totals, request: bytes) -> None:
        self.totals = totals
        self.request = request
        self.buffer = b""
        self.last = -1
        self.transport: Any = None
        self.opened: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        buffer = self.buffer + data
        if not self.opened.done():
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buffer
                return
            self.opened.set_result(buffer.startswith(b"HTTP/1.1 200"))
            buffer = buffer[end + 4 :]
        position = 0
        totals = self.totals
        while (start := buffer.find(b"data: ", position)) >= 0:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            seq, sent = buffer[start + 6 : end].split()
            number = int(seq)
            totals.lost += number - self.last - 1
            self.last = number
            if totals.recording:
                delay = now - int(sent)
                totals.delays.append(delay)
                if delay > totals.worst[0]:
                    totals.worst = (delay, now / 1e9)
            position = end + 1
        self.buffer = buffer[position:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_result(False)
        elif not self.totals.stopping:
            self.totals.broken += 1


def _request(method: str, host: str, port: int, token: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} /mcp HTTP/1.1\r\nhost: {host}:{port}\r\nauthorization: Bearer {token}\r\n"
        "accept: application/json, text/event-stream\r\n"
    ).encode()
    if method == "GET":
        return head + b"\r\n"
    return head + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


async def _open_all(
    count: int, host: str, port: int, sources: list[str], make: Any
) -> tuple[list[Any], int]:
    """`count` connections made by `make()`, 200 at a time, over the source addresses; the
    protocols and how many failed."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(200)
    addresses = itertools.cycle(sources or ["127.0.0.1"])

    async def one() -> Any:
        async with gate:
            try:
                _, protocol = await loop.create_connection(
                    make, host, port, local_addr=(next(addresses), 0)
                )
                ok = await asyncio.wait_for(asyncio.shield(protocol.opened), 30)
            except (OSError, TimeoutError):
                return None
            return protocol if ok else None

    protocols = await asyncio.gather(*(one() for _ in range(count)))
    opened = [p for p in protocols if p is not None]
    return opened, count - len(opened)


async def streams(args: list[str]) -> None:
    """N streams: `ready`, then the delays of WARMUP..WARMUP+SECONDS and the losses."""
    host, port, count, token = args[0], int(args[1]), int(args[2]), args[3]
    warmup, seconds, sources = float(args[4]), float(args[5]), args[6:]
    totals = _Totals()
    request = _request("GET", host, port, token)
    started = time.monotonic()
    opened, failed = await _open_all(
        count, host, port, sources, lambda: _StreamClient(totals, request)
    )
    _emit({"ready": len(opened), "failed": failed, "open_s": time.monotonic() - started})
    await asyncio.sleep(warmup)
    totals.recording, window = True, time.monotonic()
    await asyncio.sleep(seconds)
    totals.recording = False
    result = {
        "window": [window, time.monotonic()],
        "lost": totals.lost,
        "broken": totals.broken,
        "worst_at": totals.worst[1],
    }
    totals.stopping = True
    _emit({**result, **percentiles(totals.delays)})
    for protocol in opened:
        protocol.transport.close()


class _CallClient(asyncio.Protocol):
    """A keep-alive connection that POSTs a tools/call and reads each JSON response."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.buffer = b""
        self.transport: Any = None
        self.opened: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.answer: asyncio.Future[bool] = self.opened

    def connection_made(self, transport: Any) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
        self.transport = transport
        transport.write(self.request)

    def call(self) -> asyncio.Future[bool]:
        """Send the request again; the future of its response."""
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(self.request)
        return self.answer

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].lower()
        length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        if len(self.buffer) >= end + 4 + length:
            self.buffer = self.buffer[end + 4 + length :]
            if not self.answer.done():
                self.answer.set_result(head.startswith(b"http/1.1 200"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_result(False)


async def idle(args: list[str]) -> None:
    """K idle keep-alive connections until standard input closes."""
    host, port, count, token, sources = args[0], int(args[1]), int(args[2]), args[3], args[4:]
    request = _request("POST", host, port, token, CALL)
    started = time.monotonic()
    opened, failed = await _open_all(count, host, port, sources, lambda: _CallClient(request))
    _emit({"ready": len(opened), "failed": failed, "open_s": time.monotonic() - started})
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    lost = sum(1 for p in opened if p.transport.is_closing())
    for protocol in opened:
        protocol.transport.close()
    _emit({"closed_by_gateway": lost})


async def active(args: list[str]) -> None:
    """Sequential POSTs on one connection for SECONDS: the latencies."""
    host, port, token, seconds = args[0], int(args[1]), args[2], float(args[3])
    loop = asyncio.get_running_loop()
    request = _request("POST", host, port, token, CALL)
    _, client = await loop.create_connection(lambda: _CallClient(request), host, port)
    await client.opened
    latencies: list[int] = []
    errors = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic_ns()
        ok = await client.call()
        latencies.append(time.monotonic_ns() - started)
        errors += not ok
    client.transport.close()
    _emit({"errors": errors, **percentiles(latencies)})


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


# --- the gateway, its collections timed --------------------------------------------------------


def traced_gateway(trace: str, argv: list[str]) -> int:
    """Run the gateway with a callback timing each garbage collection (start, wall ms,
    generation, objects collected, CPU ms, young objects), dumped to `trace` at exit."""
    pauses: list[tuple[float, float, int, int, float, float]] = []
    started = [0.0, 0.0, 0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        now, cpu = time.monotonic(), time.thread_time()
        if phase == "start":
            started[:] = [now, cpu, gc.get_count()[0]]
            return
        wall, cpu_ms = (now - started[0]) * 1e3, (cpu - started[1]) * 1e3
        pauses.append((started[0], wall, info["generation"], info["collected"], cpu_ms, started[2]))

    gc.callbacks.append(callback)
    signal.signal(signal.SIGUSR1, lambda *_: _census(trace + ".census"))
    atexit.register(lambda: Path(trace).write_text(json.dumps(pauses)))
    from mcp_oauth_gateway.cli import main

    code: int = main(argv)
    return code


def _census(path: str) -> None:
    """Append the tracked objects by type (the 60 most common) to `path` (on SIGUSR1)."""
    counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
    with open(path, "a") as out:
        out.write(json.dumps(dict(counts.most_common(60))) + "\n")


def run(argv: list[str]) -> int:
    """Dispatch on the mode (see the module's docstring)."""
    mode, rest = argv[0], argv[1:]
    if mode == "gateway":
        return traced_gateway(rest[0], rest[1:])
    coroutines = {
        "backend": lambda: backend(int(rest[0]), float(rest[1])),
        "streams": lambda: streams(rest),
        "idle": lambda: idle(rest),
        "active": lambda: active(rest),
    }
    uvloop.run(coroutines[mode]())
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
