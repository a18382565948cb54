"""The gateway's ASGI app: what a request meets is declared in `stages` (the gateway's own steps,
then its route's) and built once; this app runs the process's lifespan and installs new route
tables whenever the control plane installs a snapshot."""

from __future__ import annotations

from .. import logs
from ..asgi import ASGIApp, Receive, Scope, Send
from ..controlplane.collector import collector_paused
from ..controlplane.control import ControlPlane
from ..controlplane.snapshot import Snapshot
from ..controlplane.watch import ConfigWatcher
from ..dataplane.access_log import AccessLog
from ..dataplane.bounded import CacheCounts
from ..dataplane.metrics import Metrics
from ..dataplane.routing import RouteTable
from ..dataplane.tracing import RequestTracing
from ..proxy.pool import RawUpstream
from ..proxy.upstream import Upstream
from .admin import AdminApp, ControllerView, HealthApp
from .audit_trail import AuditTrail
from .drain import Drain
from .entry import EntryContext, RouteTables, new_request_id
from .exchange import SHUTDOWN_END_WAIT
from .options import ServeOptions
from .pipeline import Assembly
from .process_state import ProcessState
from .stages import assemble_entry, entry_for, passed

__all__ = ["SHUTDOWN_END_WAIT", "GatewayApp", "new_request_id"]


class GatewayApp:
    """ASGI app; rebuilds its route tables whenever the control plane installs a snapshot."""

    def __init__(
        self,
        control: ControlPlane,
        options: ServeOptions | None = None,
        upstream: Upstream | None = None,
        process_state: ProcessState | None = None,
        watcher: ConfigWatcher | None = None,
        tracer: object | None = None,
        controller: ControllerView | None = None,
    ):
        options = options or ServeOptions()
        self.control = control
        cluster = options.deployment.cluster
        # In a cluster the objects are tenants': connect only where the egress rules allow.
        self.upstream = upstream or RawUpstream(egress=cluster.egress if cluster else None)
        self.process_state = process_state or ProcessState()
        self.audit = AuditTrail.of(options, passed) if options.audit_log is not None else None
        # With JSON logs or an audit trail every request gets an id: logged, forwarded and
        # returned, so an audit line and the answer the client got name the same request.
        request_ids = logs.json_enabled() or self.audit is not None
        self.access_log = AccessLog(json_lines=request_ids)
        self.watcher = watcher
        self.drain = Drain(options.grace_period)  # started by the server on SIGTERM
        # Metrics are collected only when there is an admin listener to read them from.
        entries = options.limits.token_cache_entries
        token_cache, authorization_cache = CacheCounts(entries), CacheCounts(entries)
        self.metrics = (
            Metrics(token_cache, authorization_cache) if options.status_port is not None else None
        )
        self.admin = AdminApp(
            control, self.metrics, watcher, controller, self.process_state, self.drain
        )
        self.routes = RouteTables(exact_ports=cluster is not None)
        self.assembly = Assembly(
            control,
            self.upstream,
            options.trust_forwarded,
            self.process_state,
            options.limits,
            self.metrics,
            token_cache,
            authorization_cache,
        )
        self.entry = self._entry(options, request_ids, tracer)
        control.subscribe(self._install)

    def _entry(self, options: ServeOptions, request_ids: bool, tracer: object | None) -> ASGIApp:
        """The gateway's own steps (`stages.ENTRY`) this process runs, built once."""
        entry = EntryContext(
            self.routes,
            options.trust_forwarded,
            options.limits,
            self.drain,
            self.access_log,
            request_ids,
            # An audit line's request id must name one request: a caller's own id is kept only
            # from the proxy in front (--trust-forwarded-headers), else replaced.
            caller_ids=self.audit is None or options.trust_forwarded,
            own=self._own_listeners(options),
            metrics=self.metrics,
            tracing=RequestTracing(tracer) if tracer is not None else None,
            audit=self.audit,
        )
        self.admin.entry = tuple(stage.name for stage in entry_for(entry))
        return assemble_entry(entry)

    @property
    def tables(self) -> dict[int, RouteTable]:
        """The route table of each listener port, as last installed."""
        return self.routes.by_port

    def _own_listeners(self, options: ServeOptions) -> dict[int, tuple[str, ASGIApp]]:
        """The ports of the gateway's own listeners: the name in access lines, the app (neither
        is audited)."""
        own: dict[int, tuple[str, ASGIApp]] = {}
        if options.status_port is not None:
            own[options.status_port] = ("admin", self.admin)
        if options.health_port is not None:
            own[options.health_port] = ("health", HealthApp(self.admin))
        return own

    def _install(self, snapshot: Snapshot) -> None:
        # One assignment: requests in flight keep the tables they started with.
        with collector_paused():
            self.routes.by_port = self.assembly.tables(snapshot)
        # What outlives reloads keeps only what the running configuration can use.
        self.process_state.retain(snapshot)
        if self.audit is not None:
            self.audit.forget_routes()
        if self.metrics is not None:
            self.metrics.watch_keysets(list(self.control.keysets.items()))
            self.metrics.keep(*_names(snapshot))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.entry(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.access_log.start()
                if self.audit is not None:
                    self.audit.start()
                await self.control.start()
                if self.watcher is not None:
                    self.watcher.start()
                self.process_state.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.watcher is not None:
                    await self.watcher.stop()
                await self.control.stop()
                await self.upstream.close()
                await self.process_state.close()
                self.access_log.stop()
                if self.audit is not None:
                    self.audit.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _names(snapshot: Snapshot) -> tuple[frozenset[str], frozenset[str]]:
    """The routes and policies a snapshot serves, as the metrics label them."""
    routes = [route for rows in snapshot.listeners.values() for route in rows]
    return (
        frozenset(route.route for route in routes),
        frozenset(route.policy.key for route in routes if route.policy is not None),
    )
