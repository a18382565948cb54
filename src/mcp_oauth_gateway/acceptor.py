"""A listening socket accepted from in batches.

libuv, under uvloop, accepts one connection per turn of the event loop (libuv pull request
3696) and waits for the next turn for the following one. A gateway whose loop is busy turns
a few tens of times a second, so a burst of new connections (clients reconnecting after a
rolling restart, a load test opening 512 at once) waits in the kernel's accept queue for
seconds: measured, 512 connections opened at once on a loaded gateway took ten seconds to
be accepted, their first requests answered up to six seconds late while every request on an
open connection took under 0.3 s. Here a readable listening socket is accepted from until it
is empty, at most `ACCEPT_BATCH` connections a turn, so that with several workers on one
socket the first to wake does not take a whole burst.

Each accepted socket is handed to the event loop's call for sockets accepted elsewhere, and
becomes a connection of the same protocol as a server's own would.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("mcp_oauth_gateway")

ACCEPT_BATCH = 128
# Out of descriptors or buffers: stop accepting for a moment instead of spinning on the
# readable socket (asyncio's own servers wait as long).
ACCEPT_RETRY_DELAY = 1.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

ProtocolFactory = Callable[[], asyncio.Protocol]


class Acceptor:
    """Accepts connections on one listening socket for `factory`'s protocol; closes as an
    asyncio server does (the connections already open stay)."""

    def __init__(
        self, sock: socket.socket, factory: ProtocolFactory, loop: asyncio.AbstractEventLoop
    ) -> None:
        sock.setblocking(False)
        self.sockets = (sock,)
        self._sock = sock
        self._factory = factory
        self._loop = loop
        self._fd = sock.fileno()
        self._connecting: set[asyncio.Task[None]] = set()
        self._retry: asyncio.TimerHandle | None = None
        self._serving = True
        loop.add_reader(self._fd, self._accept)

    @property
    def port(self) -> int:
        """The port this socket listens on."""
        port: int = self._sock.getsockname()[1]
        return port

    def is_serving(self) -> bool:
        """Whether connections are still accepted."""
        return self._serving

    def close(self) -> None:
        """Accept nothing more and close the listening socket."""
        if not self._serving:
            return
        self._serving = False
        if self._retry is not None:
            self._retry.cancel()
        else:
            self._loop.remove_reader(self._fd)
        self._sock.close()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # the client gave up while queued: nothing to serve
            except OSError as exc:
                self._pause(exc)
                return
            task = self._loop.create_task(self._connect(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError as exc:
            # The client reset the connection before it was set up: nothing to answer.
            log.debug("accepted connection lost before it was served: %s", exc)
            conn.close()

    def _pause(self, exc: OSError) -> None:
        if exc.errno not in _OUT_OF_RESOURCES:
            log.error("accepting on port %d failed: %s", self.port, exc)
            return
        log.error(
            "accepting on port %d paused for %gs: %s (raise the descriptor limit, or lower "
            "--max-connections)",
            self.port,
            ACCEPT_RETRY_DELAY,
            exc,
        )
        self._loop.remove_reader(self._fd)
        self._retry = self._loop.call_later(ACCEPT_RETRY_DELAY, self._resume)

    def _resume(self) -> None:
        self._retry = None
        if self._serving:
            self._loop.add_reader(self._fd, self._accept)
