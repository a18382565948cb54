"""Run the gateway: bind every listener port, serve with uvicorn (uvloop + httptools), drain on
SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import Iterator

import uvicorn

from .broker.runtime import BrokerRuntime
from .controlplane import ControlPlane, Snapshot
from .dataplane.app import GatewayApp

log = logging.getLogger("mcp_oauth_gateway")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the captured signal once drained, which would end the process with
        # -15; a drained shutdown is a clean exit, so only trigger the shutdown here.
        previous = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; raises OSError with the address when the port is taken."""
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


def serve(snapshot: Snapshot, host: str, trust_forwarded: bool, grace_period: float,
          brokers: BrokerRuntime | None = None) -> None:
    """Serve until SIGTERM/SIGINT; in-flight requests get `grace_period` seconds to finish."""
    sockets = [bind(host, port) for port in sorted(snapshot.listeners)]
    control = ControlPlane(snapshot)
    app = GatewayApp(control, trust_forwarded=trust_forwarded, brokers=brokers)
    config = uvicorn.Config(
        app, loop="uvloop", http="httptools", lifespan="on", access_log=False,
        server_header=False, log_config=None, timeout_graceful_shutdown=grace_period,
        timeout_keep_alive=30,
    )
    for sock in sockets:
        address = sock.getsockname()
        log.info("listening on http://%s:%d", address[0], address[1])
    _Server(config).run(sockets=sockets)
    log.info("stopped")
