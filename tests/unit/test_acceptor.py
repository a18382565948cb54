"""Listening sockets accepted from in batches (acceptor.py): a burst of new connections is
taken from the kernel's queue in one turn of the event loop, not one connection a turn as
libuv does, and a listener that is out of descriptors pauses instead of spinning."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from mcp_oauth_gateway.acceptor import ACCEPT_BATCH, ACCEPT_RETRY_DELAY, Acceptor
from support import wait_until


class Handle:
    """A task or timer handle the acceptor keeps; nothing runs."""

    def add_done_callback(self, callback: Callable[[Any], object]) -> None:
        pass

    def cancel(self) -> None:
        pass


class RecordingLoop:
    """What the acceptor asks of its loop, recorded; each connection's set-up is dropped."""

    def __init__(self) -> None:
        self.readers: dict[int, Callable[[], None]] = {}
        self.connections = 0
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        self.readers[fd] = callback

    def remove_reader(self, fd: int) -> bool:
        return self.readers.pop(fd, None) is not None

    def create_task(self, coro: Coroutine[Any, Any, None]) -> Handle:
        coro.close()
        self.connections += 1
        return Handle()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        self.timers.append((delay, callback))
        return Handle()


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def queued(sock: socket.socket) -> int:
    """Connections waiting in a listening socket's accept queue (/proc/net/tcp's rx_queue)."""
    port = f"{sock.getsockname()[1]:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port}") and fields[3] == "0A":
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"no listening socket on port {port}")


@pytest.fixture
def clients() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for client in opened:
        client.close()


def connect(sock: socket.socket, count: int, clients: list[socket.socket]) -> None:
    for _ in range(count):
        clients.append(socket.create_connection(sock.getsockname()))
    wait_until(lambda: queued(sock) == count, what=f"{count} connections queued")


def test_a_burst_is_accepted_a_batch_a_turn_until_the_queue_is_empty(clients):
    loop = RecordingLoop()
    with listening() as sock:
        acceptor = Acceptor(sock, asyncio.Protocol, loop)  # type: ignore[arg-type]
        connect(sock, ACCEPT_BATCH + 5, clients)
        turn = loop.readers[sock.fileno()]
        turn()
        assert (loop.connections, queued(sock)) == (ACCEPT_BATCH, 5)
        turn()
        assert (loop.connections, queued(sock)) == (ACCEPT_BATCH + 5, 0)
        turn()  # an empty queue: nothing, and no error
        assert loop.connections == ACCEPT_BATCH + 5
        acceptor.close()
        assert loop.readers == {}


class FailingSocket:
    """A listening socket whose accept fails with `code`."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.calls = 0

    def setblocking(self, flag: bool) -> None:
        pass

    def fileno(self) -> int:
        return 99

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 8080)

    def accept(self) -> tuple[socket.socket, Any]:
        self.calls += 1
        raise OSError(self.code, "failed")

    def close(self) -> None:
        pass


def test_out_of_descriptors_pauses_accepting_then_resumes(caplog):
    loop = RecordingLoop()
    sock = FailingSocket(errno.EMFILE)
    acceptor = Acceptor(sock, asyncio.Protocol, loop)  # type: ignore[arg-type]
    loop.readers[99]()
    # One try, not a spin over a socket that stays readable: the reader waits out the delay.
    assert (sock.calls, loop.readers, [d for d, _ in loop.timers]) == (1, {}, [ACCEPT_RETRY_DELAY])
    assert "accepting on port 8080 paused" in caplog.text
    assert "raise the descriptor limit" in caplog.text
    loop.timers[0][1]()
    assert list(loop.readers) == [99]
    acceptor.close()
    assert loop.readers == {}


def test_another_accept_error_is_logged_and_accepting_goes_on(caplog):
    loop = RecordingLoop()
    sock = FailingSocket(errno.EPERM)
    Acceptor(sock, asyncio.Protocol, loop)  # type: ignore[arg-type]
    loop.readers[99]()
    assert (list(loop.readers), loop.timers) == ([99], [])
    assert "accepting on port 8080 failed" in caplog.text


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


@pytest.mark.parametrize("loop_factory", [uvloop.new_event_loop, asyncio.new_event_loop])
def test_connections_are_served_and_close_stops_only_new_ones(loop_factory):
    async def scenario() -> None:
        sock = listening()
        port = sock.getsockname()[1]
        acceptor = Acceptor(sock, Echo, asyncio.get_running_loop())
        streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(300)]
        for i, (_, writer) in enumerate(streams):
            writer.write(b"%d\n" % i)
        answers = [await reader.readline() for reader, _ in streams]
        assert answers == [b"%d\n" % i for i in range(300)]
        acceptor.close()
        assert not acceptor.is_serving()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        reader, writer = streams[0]
        writer.write(b"still open\n")
        assert await reader.readline() == b"still open\n"
        for _, writer in streams:
            writer.close()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(scenario())
