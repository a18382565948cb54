"""Run the gateway: bind every listener port, serve with uvicorn (uvloop + httptools, with the
connection limits of connections.py), drain on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import uvicorn

from . import logs
from .acceptor import Acceptor
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
from .listeners import DynamicListeners, open_socket
from .serving.app import SHUTDOWN_END_WAIT, GatewayApp
from .serving.drain import Drain
from .serving.options import ServeOptions, own_ports
from .serving.process_state import ProcessState

if TYPE_CHECKING:
    from .kube.controller import Controller, ControllerOptions

log = logging.getLogger("mcp_oauth_gateway")
# How often a drain looks whether what is in flight has finished (as uvicorn's own shutdown).
DRAIN_POLL = 0.1


class _Server(uvicorn.Server):
    """uvicorn's server, accepting in batches (acceptor.py) and draining the gateway's way on
    SIGTERM/SIGINT (`shutdown`)."""

    def __init__(
        self, config: uvicorn.Config, drain: Drain, guard: ConnectionGuard, options: ServeOptions
    ):
        super().__init__(config)
        self.drain = drain
        self.guard = guard
        # The admin and health listeners answer (readiness: draining) until the drain is over.
        self.own_ports = frozenset(own_ports(options))
        # Every listening socket, in place of uvicorn's `servers` (which stays empty).
        self.acceptors: list[Acceptor] = []

    def _protocol(self) -> asyncio.Protocol:
        protocol: asyncio.Protocol = self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )
        return protocol

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up (the lifespan), then accept on `sockets`."""
        # An empty list: uvicorn binds nothing of its own and logs no address.
        await super().startup([])
        loop = asyncio.get_running_loop()
        self.acceptors = [Acceptor(sock, self._protocol, loop) for sock in sockets or []]

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

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Drain: readiness turns to `draining`, the Gateway listeners stop accepting, idle
        connections close, event streams end where clients can resume them (drain.py), and
        requests in flight get the grace period; what still runs then is cut. Then the app
        stops. One log line per phase."""
        began = time.monotonic()
        self.guard.draining = True
        streams = self.drain.start()
        log.info(
            "draining: %d requests, %d streams in flight (--grace-period %gs)",
            max(0, len(self.server_state.tasks) - streams),
            streams,
            self.drain.grace,
        )
        own = [acceptor for acceptor in self.acceptors if acceptor.port in self.own_ports]
        for acceptor in self.acceptors:
            if acceptor not in own:
                acceptor.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        await self.release()
        cut = await self._finish_in_flight(began + self.drain.grace)
        self.drain.stop()
        for acceptor in own:
            acceptor.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        if not self.force_exit:
            await self.lifespan.shutdown()
        elapsed = time.monotonic() - began
        if cut:
            log.warning("drained in %.1fs: %d requests cut at the grace period's end", elapsed, cut)
        else:
            log.info("drained in %.1fs", elapsed)

    async def release(self) -> None:
        """What to give up once nothing new is accepted, while requests finish (file mode:
        nothing)."""

    def _serving(self, deadline: float) -> bool:
        """Whether requests run, or connections of the Gateway listeners are open, before
        `deadline` (and no second SIGINT forced the exit)."""
        if self.force_exit or time.monotonic() >= deadline:
            return False
        if self.server_state.tasks:
            return True
        return any(
            _local_port(connection) not in self.own_ports
            for connection in self.server_state.connections
        )

    async def _finish_in_flight(self, deadline: float) -> int:
        """Wait for what is in flight until `deadline`; then cut what still runs (each
        ends its answer, SHUTDOWN_END_WAIT at most). How many were cut."""
        # Connections close without a task to wait for: look again shortly (as uvicorn does).
        while self._serving(deadline):  # noqa: ASYNC110
            await asyncio.sleep(DRAIN_POLL)
        running = list(self.server_state.tasks)
        if not running:
            return 0
        for task in running:
            task.cancel(msg="the grace period (--grace-period) ended")
        await asyncio.wait(running, timeout=SHUTDOWN_END_WAIT + DRAIN_POLL)
        return len(running)


def _local_port(connection: object) -> int | None:
    """The port a client connection came in on (None: unknown)."""
    address = getattr(connection, "server", None)
    return address[1] if address else None


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; raises OSError with the address when the port is taken."""
    return open_socket(host, port)


def own_sockets(options: ServeOptions) -> list[socket.socket]:
    """The admin and health listeners' sockets (those asked for). The admin listener is for
    operators on the machine: loopback unless --admin-host says otherwise, and said loudly
    then, since its /config and /status describe every route and rule."""
    sockets = []
    if options.status_port is not None:
        if not is_loopback(options.admin_host):
            log.warning(
                "the admin listener on %s:%d answers /config, /status and /metrics to whoever "
                "reaches that address: keep it on loopback, or only behind a NetworkPolicy "
                "(docs/kubernetes.md)",
                options.admin_host,
                options.status_port,
            )
        sockets.append(bind(options.admin_host, options.status_port))
    if options.health_port is not None:
        sockets.append(bind(options.health_host, options.health_port))
    return sockets


def is_loopback(host: str) -> bool:
    """Whether `host` is an address of this machine's loopback only (or `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tune_gc() -> None:
    """Move start-up objects out of the collector's way and collect less often: the request
    path allocates many short-lived objects, and full collections show up as latency spikes."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _uvicorn_config(
    app: GatewayApp, guard: ConnectionGuard, options: ServeOptions
) -> uvicorn.Config:
    """The HTTP server's settings: the guarded protocol, no extras (`_Server` drains)."""
    return uvicorn.Config(
        app,
        loop="uvloop",
        http=protocol_class(guard),
        lifespan="on",
        access_log=False,
        server_header=False,
        log_config=None,
        # uvicorn's annotations say int; it passes the value to asyncio, which takes a float.
        timeout_keep_alive=options.limits.idle_timeout,  # type: ignore[arg-type]
        # The gateway serves no WebSockets; an upgraded connection would leave the protocol
        # that counts it against --max-connections.
        ws="none",
        # Forwarded headers are the gateway's own decision (--trust-forwarded-headers).
        proxy_headers=False,
    )


def _run_worker(
    snapshot: Snapshot,
    sockets: list[socket.socket],
    options: ServeOptions,
    process_state: ProcessState | None,
) -> None:
    control = ControlPlane(snapshot)
    if options.audit_log is not None:
        # A rotation's SIGHUP must not end a worker still starting: the audit trail handles it
        # once serving (its default action would terminate the process).
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Built here, in the process that serves: the exporter's thread does not survive a fork.
    tracer = otlp_tracer() if options.tracing else None
    watch = options.watch
    watcher = (
        ConfigWatcher(
            list(watch.paths), control, watch.interval, options.deployment, caches=watch.caches
        )
        if watch
        else None
    )
    app = GatewayApp(control, options, process_state=process_state, watcher=watcher, tracer=tracer)
    # Without an admin listener nothing exports the counts, but the cap still needs them.
    counts = app.metrics.connections if app.metrics is not None else ConnectionCounts()
    guard = ConnectionGuard(options.limits, counts, own_ports(options))
    config = _uvicorn_config(app, guard, options)
    tune_gc()
    _Server(config, app.drain, guard, options).run(sockets=sockets)


def _worker_main(
    snapshot: Snapshot,
    sockets: list[socket.socket],
    options: ServeOptions,
    process_state: ProcessState | None,
) -> None:
    # A forked child has no logging thread of its own: start one.
    logs.configure(options.log_level, options.log_format)
    _run_worker(snapshot, sockets, options, process_state)


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


def serve(
    snapshot: Snapshot, options: ServeOptions, process_state: ProcessState | None = None
) -> int:
    """Serve until SIGTERM/SIGINT; in-flight requests get the grace period to finish. With
    several workers, that many processes accept on the same listening sockets."""
    options = replace(options, limits=connection_limits(options.limits))
    sockets = [bind(options.host, port) for port in sorted(snapshot.listeners)]
    sockets += own_sockets(options)
    for sock in sockets:
        address = sock.getsockname()
        log.info("listening on http://%s:%d", address[0], address[1])
    if options.workers <= 1:
        _run_worker(snapshot, sockets, options, process_state)
        log.info("stopped")
        return 0
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(
            target=_worker_main,
            name=f"worker-{i}",
            args=(snapshot, sockets, options, process_state),
        )
        for i in range(options.workers)
    ]
    for child in children:
        child.start()
    # The workers hold the listening sockets now: once they close theirs at SIGTERM, a new
    # connection is refused (the load balancer tries another replica) rather than left
    # waiting in a backlog nobody accepts from.
    for sock in sockets:
        sock.close()
    log.info("started %d worker processes", options.workers)
    code = _supervise(children, forward_hup=options.audit_log is not None)
    for child in children:
        if child.is_alive() and child.pid is not None:
            os.kill(child.pid, signal.SIGTERM)
    for child in children:
        child.join(options.grace_period + 5)
        if child.is_alive():
            child.kill()
    log.info("stopped")
    return code


def _supervise(
    children: Sequence[multiprocessing.process.BaseProcess], forward_hup: bool = False
) -> int:
    """Wait for SIGTERM/SIGINT (0) or for a worker to die (1). With `forward_hup` (an audit
    log), SIGHUP is passed on to every worker: each reopens its own descriptor of the file."""
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    def hup(signum: int, frame: object) -> None:
        for child in children:
            if child.pid is not None and child.is_alive():
                os.kill(child.pid, signal.SIGHUP)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    if forward_hup:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, hup)
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


# --- controller mode ---------------------------------------------------------------------------


class _ClusterView:
    """Readiness and `/status` of controller mode, before and after the controller starts."""

    def __init__(self) -> None:
        self.controller: Controller | None = None
        self.listeners: DynamicListeners | None = None

    def waiting(self) -> list[str]:
        """Why this replica is not ready."""
        if self.controller is None or self.listeners is None:
            return ["connecting to the API server"]
        return self.controller.waiting() + self.listeners.waiting()

    def state(self) -> dict[str, Any]:
        """The controller's state and the listeners that could not be bound."""
        if self.controller is None or self.listeners is None:
            return {"connected": False}
        return {
            **self.controller.state(),
            "listeners": sorted(self.listeners.bound),
            "unboundListeners": {str(p): why for p, why in sorted(self.listeners.unbound.items())},
        }


def reserved_ports(options: ServeOptions) -> dict[int, str]:
    """The ports no Gateway listener may take in a cluster, with why (its status says so)."""
    return {port: f"port {port} is {holder}" for port, holder in own_ports(options).items()}


class _ClusterServer(_Server):
    """The HTTP server of controller mode: starts the controller once serving, and stops it
    (giving up the Lease) before draining."""

    def __init__(
        self,
        config: uvicorn.Config,
        control: ControlPlane,
        options: ServeOptions,
        controller_options: ControllerOptions,
        view: _ClusterView,
        drain: Drain,
        guard: ConnectionGuard,
    ):
        super().__init__(config, drain, guard, options)
        self.control = control
        self.options = options
        self.controller_options = controller_options
        self.view = view
        self.failed = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve the admin listener, connect, then start the controller and the listeners."""
        # Imported here, in controller mode only: the Kubernetes client brings a thousand
        # modules (about 30 MB and a second of start-up) that file mode never uses.
        from .kube.client import ConnectError, connect
        from .kube.controller import Controller

        await super().startup(sockets)
        try:
            client = await connect(self.controller_options.kubeconfig)
        except ConnectError as exc:
            log.error("%s", exc)
            self.failed = self.should_exit = True
            return
        # The cluster's own service-account keys (workloadIdentity's `jwks.kubernetes`).
        self.control.cluster_documents = client.document
        reserved = reserved_ports(self.options)
        listeners = DynamicListeners(self.options.host, self._protocol, self.acceptors, reserved)
        controller = Controller(
            client,
            self.control,
            self.controller_options,
            self.options.deployment,
            unbound=lambda: listeners.unbound,
        )
        self.view.controller, self.view.listeners = controller, listeners
        self.control.subscribe(listeners.on_snapshot)
        controller.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Drain as in file mode, no Gateway listener opening any more."""
        if self.view.listeners is not None:
            self.view.listeners.close()
        await super().shutdown(sockets)

    async def release(self) -> None:
        """Give up the Lease and stop watching while requests finish."""
        if self.view.controller is not None:
            await self.view.controller.stop()


def serve_cluster(
    options: ServeOptions, controller_options: ControllerOptions, process_state: ProcessState
) -> int:
    """Serve what the API server describes until SIGTERM/SIGINT (controller mode)."""
    options = replace(options, limits=connection_limits(options.limits))
    sockets = own_sockets(options)
    for sock in sockets:
        address = sock.getsockname()
        log.info("listening on http://%s:%d", address[0], address[1])
    cluster = options.deployment.cluster
    control = ControlPlane(Snapshot.empty(), cluster.egress if cluster else None)
    view = _ClusterView()
    tracer = otlp_tracer() if options.tracing else None
    app = GatewayApp(control, options, process_state=process_state, tracer=tracer, controller=view)
    counts = app.metrics.connections if app.metrics is not None else ConnectionCounts()
    guard = ConnectionGuard(options.limits, counts, own_ports(options))
    config = _uvicorn_config(app, guard, options)
    server = _ClusterServer(config, control, options, controller_options, view, app.drain, guard)
    tune_gc()
    server.run(sockets=sockets)
    log.info("stopped")
    return 1 if server.failed else 0
