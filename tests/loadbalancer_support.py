"""A TCP load balancer on loopback for tests of replicas: what a Kubernetes Service or a cloud load
balancer does to connections, with nothing closed on its own.

    with LoadBalancer([port_a]) as lb:       # listens on a free 127.0.0.1 port
        url = lb.url("/mcp")                 # http://127.0.0.1:<lb.port>/mcp
        lb.add(port_b)                       # a backend joins (a new replica is ready)
        lb.remove(port_a)                    # new connections no longer go to port_a
        lb.forwarded[port_b], lb.refused[port_a]

Each new client connection goes to the next backend in turn (round robin); a backend that
refuses the connection is skipped for the next one (counted in `refused`), so a replica that
stopped accepting is passed over as a real load balancer passes over a failed endpoint. When
none accepts, the client's connection is closed (counted in `unserved`). Bytes are relayed both
ways as they come; an end of stream from one side is passed to the other as a half-close, a
reset as a reset, and nothing times out. `add` and `remove` take effect for the next
connection; connections already open stay where they are. It runs in a thread of its own, so
synchronous and asyncio tests use it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Iterable
from types import TracebackType

from support import free_port

CHUNK = 64 * 1024


class LoadBalancer:
    """See the module's docstring."""

    def __init__(self, backends: Iterable[int] = ()):
        self.port = free_port()
        self.forwarded: Counter[int] = Counter()
        self.refused: Counter[int] = Counter()
        self.unserved = 0
        self._backends = list(backends)
        self._next = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    def url(self, path: str = "") -> str:
        """`http://127.0.0.1:<port><path>`."""
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def backends(self) -> list[int]:
        """The backend ports new connections go to, in turn."""
        with self._lock:
            return list(self._backends)

    def add(self, port: int) -> None:
        """Send new connections to `port` too."""
        with self._lock:
            if port not in self._backends:
                self._backends.append(port)

    def remove(self, port: int) -> None:
        """Send no new connection to `port` (those open stay open)."""
        with self._lock:
            if port in self._backends:
                self._backends.remove(port)

    def __enter__(self) -> LoadBalancer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.transport.abort()

    def _order(self) -> list[int]:
        """The backends to try for a new connection: the next in turn first."""
        with self._lock:
            backends = list(self._backends)
            start = self._next % len(backends) if backends else 0
            self._next += 1
        return backends[start:] + backends[:start]

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for port in self._order():
            try:
                streams = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                self.refused[port] += 1
                continue
            self.forwarded[port] += 1
            return streams
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            backend = await self._connect()
            if backend is None:
                self.unserved += 1
                return
            self._open.add(backend[1])
            try:
                await asyncio.gather(_pipe(reader, backend[1]), _pipe(backend[0], writer))
            finally:
                self._open.discard(backend[1])
                backend[1].close()
        finally:
            self._open.discard(writer)
            writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Relay `source` to `sink` until it ends (then half-close `sink`) or breaks (then reset
    `sink`, as the peer reset its side)."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    except OSError:
        sink.transport.abort()
        return
    with contextlib.suppress(OSError):
        if sink.can_write_eof() and not sink.transport.is_closing():
            sink.write_eof()
