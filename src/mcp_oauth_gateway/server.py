"""Run the gateway: bind every listener port, serve with uvicorn (uvloop + httptools, with the
connection limits of connections.py), drain on SIGTERM."""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import replace

import uvicorn

from . import logs
from .broker.runtime import BrokerRuntime
from .connections import (
    ConnectionGuard,
    default_max_connections,
    protocol_class,
    raise_fd_limit,
)
from .controlplane import ControlPlane, Snapshot
from .controlplane.watch import ConfigWatcher
from .dataplane.app import GatewayApp
from .dataplane.limits import Limits
from .dataplane.metrics import ConnectionCounts
from .dataplane.tracing import otlp_tracer

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


def tune_gc() -> None:
    """Move start-up objects out of the collector's way and collect less often: the request
    path allocates many short-lived objects, and full collections show up as latency spikes."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _run_worker(snapshot: Snapshot, sockets: list[socket.socket], trust_forwarded: bool,
                grace_period: float, brokers: BrokerRuntime | None,
                watch: tuple[list[str], float] | None, limits: Limits | None = None,
                status_port: int | None = None, tracing: bool = False) -> None:
    control = ControlPlane(snapshot)
    # Built here, in the process that serves: the exporter's thread does not survive a fork.
    tracer = otlp_tracer() if tracing else None
    watcher = ConfigWatcher(watch[0], control, watch[1]) if watch else None
    limits = limits or Limits()
    app = GatewayApp(control, trust_forwarded=trust_forwarded, brokers=brokers,
                     watcher=watcher, limits=limits, status_port=status_port, tracer=tracer)
    # Without an admin listener nothing exports the counts, but the cap still needs them.
    counts = app.metrics.connections if app.metrics is not None else ConnectionCounts()
    guard = ConnectionGuard(limits, counts, () if status_port is None else (status_port,))
    config = uvicorn.Config(
        app, loop="uvloop", http=protocol_class(guard), lifespan="on", access_log=False,
        server_header=False, log_config=None, timeout_graceful_shutdown=grace_period,
        timeout_keep_alive=limits.idle_timeout,  # type: ignore[arg-type]  # a float works
        # The gateway serves no WebSockets; an upgraded connection would leave the protocol
        # that counts it against --max-connections.
        ws="none",
        # Forwarded headers are the gateway's own decision (--trust-forwarded-headers).
        proxy_headers=False,
    )
    tune_gc()
    _Server(config).run(sockets=sockets)


def _worker_main(snapshot: Snapshot, sockets: list[socket.socket], trust_forwarded: bool,
                 grace_period: float, brokers: BrokerRuntime | None,
                 watch: tuple[list[str], float] | None, level: str,
                 limits: Limits | None, status_port: int | None, log_format: str,
                 tracing: bool) -> None:
    # A forked child has no logging thread of its own: start one.
    logs.configure(level, log_format)
    _run_worker(snapshot, sockets, trust_forwarded, grace_period, brokers, watch, limits,
                status_port, tracing)


def connection_limits(limits: Limits) -> Limits:
    """`limits` with the connection cap settled: raise the descriptor limit (forked workers
    inherit it), derive the cap from it unless one was given, and log what applies."""
    fd_limit = raise_fd_limit()
    room = default_max_connections(fd_limit)
    if limits.max_connections is None:
        limits = replace(limits, max_connections=room)
    elif limits.max_connections > room:
        log.warning("--max-connections %d is more than the descriptor limit %d leaves room for "
                    "(%d, counting a backend connection per client); past that, accepting "
                    "fails instead of answering 503", limits.max_connections, fd_limit, room)
    log.info("connections: at most %d open per process (descriptor limit %d), request head "
             "within %gs, request body and keep-alive idle for at most %gs",
             limits.max_connections, fd_limit, limits.header_timeout, limits.idle_timeout)
    return limits


def serve(snapshot: Snapshot, host: str, trust_forwarded: bool, grace_period: float,
          brokers: BrokerRuntime | None = None, workers: int = 1,
          log_level: str = "info", watch: tuple[list[str], float] | None = None,
          limits: Limits | None = None, status_port: int | None = None,
          log_format: str = "text", tracing: bool = False) -> int:
    """Serve until SIGTERM/SIGINT; in-flight requests get `grace_period` seconds to finish.

    With `workers` > 1, that many processes accept on the same listening sockets."""
    limits = connection_limits(limits or Limits())
    sockets = [bind(host, port) for port in sorted(snapshot.listeners)]
    if status_port is not None:
        # Status is for operators on the machine only: always loopback.
        sockets.append(bind("127.0.0.1", status_port))
    for sock in sockets:
        address = sock.getsockname()
        log.info("listening on http://%s:%d", address[0], address[1])
    if workers <= 1:
        _run_worker(snapshot, sockets, trust_forwarded, grace_period, brokers, watch, limits,
                    status_port, tracing)
        log.info("stopped")
        return 0
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_worker_main, name=f"worker-{i}",
                                args=(snapshot, sockets, trust_forwarded, grace_period,
                                      brokers, watch, log_level, limits, status_port,
                                      log_format, tracing))
                for i in range(workers)]
    for child in children:
        child.start()
    log.info("started %d worker processes", workers)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        while not stopping:
            dead = [c for c in children if not c.is_alive()]
            if dead:
                log.error("worker %s exited with code %s; stopping the others", dead[0].name,
                          dead[0].exitcode)
                code = 1
                break
            time.sleep(0.2)
    finally:
        for child in children:
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signal.SIGTERM)
        for child in children:
            child.join(grace_period + 5)
            if child.is_alive():
                child.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("stopped")
    return code
