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
from collections.abc import Iterator, Sequence
from dataclasses import replace

import uvicorn

from . import logs
from .asgi import Limits
from .connections import (
    ConnectionGuard,
    default_max_connections,
    protocol_class,
    raise_fd_limit,
)
from .controlplane import ControlPlane, Snapshot
from .controlplane.watch import ConfigWatcher
from .dataplane.metrics import ConnectionCounts
from .dataplane.tracing import otlp_tracer
from .serving.app import GatewayApp
from .serving.options import ServeOptions
from .serving.runtime import BrokerRuntime

log = logging.getLogger("mcp_oauth_gateway")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the captured signal once drained, which would end the process with
        # -15; a drained shutdown is a clean exit, so only trigger the shutdown here.
        previous = {
            sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)
        }
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


def _run_worker(
    snapshot: Snapshot,
    sockets: list[socket.socket],
    options: ServeOptions,
    brokers: BrokerRuntime | None,
) -> None:
    control = ControlPlane(snapshot)
    # Built here, in the process that serves: the exporter's thread does not survive a fork.
    tracer = otlp_tracer() if options.tracing else None
    watch = options.watch
    watcher = (
        ConfigWatcher(list(watch.paths), control, watch.interval, options.deployment)
        if watch
        else None
    )
    app = GatewayApp(control, options, brokers=brokers, watcher=watcher, tracer=tracer)
    # Without an admin listener nothing exports the counts, but the cap still needs them.
    counts = app.metrics.connections if app.metrics is not None else ConnectionCounts()
    status_port = options.status_port
    guard = ConnectionGuard(options.limits, counts, () if status_port is None else (status_port,))
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http=protocol_class(guard),
        lifespan="on",
        access_log=False,
        server_header=False,
        log_config=None,
        # uvicorn's annotations say int; it passes the value to asyncio, which takes a float.
        timeout_graceful_shutdown=options.grace_period,  # type: ignore[arg-type]
        timeout_keep_alive=options.limits.idle_timeout,  # type: ignore[arg-type]  # likewise
        # The gateway serves no WebSockets; an upgraded connection would leave the protocol
        # that counts it against --max-connections.
        ws="none",
        # Forwarded headers are the gateway's own decision (--trust-forwarded-headers).
        proxy_headers=False,
    )
    tune_gc()
    _Server(config).run(sockets=sockets)


def _worker_main(
    snapshot: Snapshot,
    sockets: list[socket.socket],
    options: ServeOptions,
    brokers: BrokerRuntime | None,
) -> None:
    # A forked child has no logging thread of its own: start one.
    logs.configure(options.log_level, options.log_format)
    _run_worker(snapshot, sockets, options, brokers)


def connection_limits(limits: Limits) -> Limits:
    """`limits` with the connection cap settled: raise the descriptor limit (forked workers
    inherit it), derive the cap from it unless one was given, and log what applies."""
    fd_limit = raise_fd_limit()
    room = default_max_connections(fd_limit)
    if limits.max_connections is None:
        limits = replace(limits, max_connections=room)
    elif limits.max_connections > room:
        log.warning(
            "--max-connections %d is more than the descriptor limit %d leaves room for "
            "(%d, counting a backend connection per client); past that, accepting "
            "fails instead of answering 503",
            limits.max_connections,
            fd_limit,
            room,
        )
    log.info(
        "connections: at most %d open per process (descriptor limit %d), request head "
        "within %gs, request body and keep-alive idle for at most %gs",
        limits.max_connections,
        fd_limit,
        limits.header_timeout,
        limits.idle_timeout,
    )
    return limits


def serve(snapshot: Snapshot, options: ServeOptions, brokers: BrokerRuntime | None = None) -> int:
    """Serve until SIGTERM/SIGINT; in-flight requests get the grace period to finish. With
    several workers, that many processes accept on the same listening sockets."""
    options = replace(options, limits=connection_limits(options.limits))
    sockets = [bind(options.host, port) for port in sorted(snapshot.listeners)]
    if options.status_port is not None:
        # Status is for operators on the machine only: always loopback.
        sockets.append(bind("127.0.0.1", options.status_port))
    for sock in sockets:
        address = sock.getsockname()
        log.info("listening on http://%s:%d", address[0], address[1])
    if options.workers <= 1:
        _run_worker(snapshot, sockets, options, brokers)
        log.info("stopped")
        return 0
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(
            target=_worker_main, name=f"worker-{i}", args=(snapshot, sockets, options, brokers)
        )
        for i in range(options.workers)
    ]
    for child in children:
        child.start()
    log.info("started %d worker processes", options.workers)
    code = _supervise(children)
    for child in children:
        if child.is_alive() and child.pid is not None:
            os.kill(child.pid, signal.SIGTERM)
    for child in children:
        child.join(options.grace_period + 5)
        if child.is_alive():
            child.kill()
    log.info("stopped")
    return code


def _supervise(children: Sequence[multiprocessing.process.BaseProcess]) -> int:
    """Wait for SIGTERM/SIGINT (0) or for a worker to die (1)."""
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping:
            dead = [c for c in children if not c.is_alive()]
            if dead:
                log.error(
                    "worker %s exited with code %s; stopping the others",
                    dead[0].name,
                    dead[0].exitcode,
                )
                return 1
            time.sleep(0.2)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
