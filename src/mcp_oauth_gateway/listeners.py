"""Listening ports that follow the snapshot (controller mode: the ports come from Gateways).

A port a new snapshot adds is bound on `--host` and served by the running server, with the same
protocol (connection limits included) as every other listener; a port it drops stops accepting,
and the connections already open on it finish what they started. A port that cannot be bound
is reported (readiness, the Gateway's listener status) and tried again until it can be.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from .acceptor import Acceptor, ProtocolFactory
from .controlplane.snapshot import Snapshot

log = logging.getLogger("mcp_oauth_gateway")

RETRY_INTERVAL = 5.0


def open_socket(host: str, port: int) -> socket.socket:
    """A listening socket; OSError naming the address when it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class DynamicListeners:
    """The Gateway listener ports this process accepts on, kept equal to the snapshot's."""

    def __init__(
        self,
        host: str,
        factory: ProtocolFactory,
        servers: list[Acceptor],
        reserved: dict[int, str] | None = None,
    ):
        self.host = host
        self.factory = factory
        # The list the HTTP server closes on shutdown: listeners added here close with it.
        self.servers = servers
        self.reserved = reserved or {}
        self.bound: dict[int, Acceptor] = {}
        self.unbound: dict[int, str] = {}
        self.wanted: frozenset[int] = frozenset()
        self._retry: asyncio.Task[None] | None = None
        # Snapshots can arrive faster than ports open: one reconcile at a time.
        self._lock = asyncio.Lock()
        self.closed = False

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Open the snapshot's new ports and close the ones it no longer has."""
        if self.closed:
            return  # draining: the server closes every listener, none opens
        self.wanted = frozenset(snapshot.listeners)
        asyncio.get_running_loop().create_task(self.reconcile())

    async def reconcile(self) -> None:
        """Make the bound ports the wanted ones (as far as the system allows)."""
        async with self._lock:
            await self._reconcile()

    async def _reconcile(self) -> None:
        for port in sorted(set(self.bound) - self.wanted):
            server = self.bound.pop(port)
            server.close()
            if server in self.servers:
                self.servers.remove(server)
            log.info("stopped listening on %s:%d (no Gateway listener uses it)", self.host, port)
        for port in list(self.unbound):
            if port not in self.wanted:
                del self.unbound[port]
        for port in sorted(self.wanted - set(self.bound)):
            await self._open(port)
        if self.unbound and (self._retry is None or self._retry.done()):
            self._retry = asyncio.create_task(self._retry_later(), name="listener-retry")

    async def _open(self, port: int) -> None:
        if self.closed:
            return
        if port in self.reserved:
            self._unbound(port, self.reserved[port])
            return
        try:
            sock = open_socket(self.host, port)
        except OSError as exc:
            self._unbound(port, str(exc))
            return
        server = Acceptor(sock, self.factory, asyncio.get_running_loop())
        self.bound[port] = server
        self.servers.append(server)
        self.unbound.pop(port, None)
        log.info("listening on http://%s:%d", self.host, port)

    def _unbound(self, port: int, why: str) -> None:
        if self.unbound.get(port) != why:
            log.error("Gateway listener port %d is not served: %s", port, why)
        self.unbound[port] = why

    async def _retry_later(self) -> None:
        while self.unbound:
            await asyncio.sleep(RETRY_INTERVAL)
            async with self._lock:
                for port in sorted(set(self.unbound) & self.wanted):
                    if port not in self.reserved:
                        await self._open(port)

    def waiting(self) -> list[str]:
        """Ports that should be served and are not, for readiness."""
        return [f"listener port {port}: {why}" for port, why in sorted(self.unbound.items())]

    def close(self) -> None:
        """Open no port any more, nor retry (the server closes the listeners themselves)."""
        self.closed = True
        if self._retry is not None:
            self._retry.cancel()
