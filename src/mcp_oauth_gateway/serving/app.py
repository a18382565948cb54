"""The gateway's ASGI entry point: pick the route table by listener port, the route by host and
path, run its prebuilt pipeline, and write one access-log line."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import re
import secrets
import time

from .. import audit, logs
from ..asgi import (
    CLAIMS_KEY,
    TRUST_FORWARDED_KEY,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    header,
    header_bytes,
    send_error,
)
from ..controlplane.collector import collector_paused
from ..controlplane.control import ControlPlane
from ..controlplane.snapshot import Snapshot
from ..controlplane.watch import ConfigWatcher
from ..dataplane.access_log import AccessLog
from ..dataplane.bounded import CacheCounts
from ..dataplane.cors import CorsFilter
from ..dataplane.headers import HeaderRules
from ..dataplane.metrics import Metrics
from ..dataplane.routing import RouteTable
from ..dataplane.tracing import RequestTracing
from ..proxy.pool import RawUpstream
from ..proxy.upstream import Upstream
from .admin import AdminApp, ControllerView, HealthApp
from .audit_trail import AuditLine, AuditTrail
from .drain import RETRY, Drain, Stream
from .options import ServeOptions
from .pipeline import Assembly, FailClosed
from .process_state import ProcessState

log = logging.getLogger("mcp_oauth_gateway")
# Ids from callers are kept only when short and plain, so they cannot forge log structure.
REQUEST_ID_SHAPE = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


class _RequestIds:
    """Request ids need to be unique, not secret: a random per-process prefix and a counter (32
    hex digits, like the uuid4 they replace) cost no random bytes per request. A forked worker
    (`--workers N`) draws a prefix of its own: sharing its parent's, every worker would hand
    out the same ids, and audit lines of different requests would name one request."""

    __slots__ = ("counter", "prefix")

    def __init__(self) -> None:
        self.prefix = ""
        self.counter = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        """A new prefix, counting from 1."""
        self.prefix = secrets.token_hex(8)
        self.counter = itertools.count(1)


_IDS = _RequestIds()
os.register_at_fork(after_in_child=_IDS.reset)


def new_request_id() -> str:
    """A request id unique across processes and restarts (random prefix, counter)."""
    return f"{_IDS.prefix}{next(_IDS.counter) & 0xFFFFFFFFFFFFFFFF:016x}"


# How long a stream cut at shutdown may take to be ended cleanly (a client not reading).
SHUTDOWN_END_WAIT = 1.0


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
        self.trust_forwarded = options.trust_forwarded
        self.header_rules = HeaderRules(options.trust_forwarded)
        cluster = options.deployment.cluster
        # In a cluster the objects are tenants': connect only where the egress rules allow.
        self.upstream = upstream or RawUpstream(egress=cluster.egress if cluster else None)
        self.process_state = process_state or ProcessState()
        self.audit = AuditTrail.of(options) if options.audit_log is not None else None
        # With JSON logs or an audit trail every request gets an id: logged, forwarded and
        # returned, so an audit line and the answer the client got name the same request.
        self.request_ids = logs.json_enabled() or self.audit is not None
        # An audit line's request id must name one request: a caller's own X-Request-Id (which
        # anyone may set to another request's id, or to the ids the gateway hands out next) is
        # kept only from the proxy in front (--trust-forwarded-headers), else replaced.
        self.caller_ids = self.audit is None or options.trust_forwarded
        self.access_log = AccessLog(json_lines=self.request_ids)
        self.watcher = watcher
        self.limits = options.limits
        self.drain = Drain(options.grace_period)  # started by the server on SIGTERM
        # Metrics are collected only when there is an admin listener to read them from.
        entries = self.limits.token_cache_entries
        token_cache, authorization_cache = CacheCounts(entries), CacheCounts(entries)
        self.metrics = (
            Metrics(token_cache, authorization_cache) if options.status_port is not None else None
        )
        self.tracing = RequestTracing(tracer) if tracer is not None else None
        self.admin = AdminApp(
            control, self.metrics, watcher, controller, self.process_state, self.drain
        )
        self.own = self._own_listeners(options)
        # From files, one listener's table also answers requests whose port the server did not
        # report; in a cluster, listeners come and go, and a connection left open on a port no
        # Gateway has any more must not reach another listener's routes.
        self.exact_ports = options.deployment.cluster is not None
        self.assembly = Assembly(
            control,
            self.upstream,
            self.trust_forwarded,
            self.process_state,
            self.limits,
            self.metrics,
            token_cache,
            authorization_cache,
        )
        self.tables: dict[int, RouteTable] = {}
        control.subscribe(self._install)

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
            self.tables = self.assembly.tables(snapshot)
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
            await self._http(scope, receive, send)
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

    def _assign_request_id(self, scope: Scope) -> str:
        """The caller's `X-Request-Id` when well-formed (and, with the audit trail, sent by a
        trusted proxy), else a new one; the backend sees it."""
        headers = scope["headers"]
        given = header(scope, b"x-request-id")
        if given is not None and self.caller_ids and REQUEST_ID_SHAPE.fullmatch(given):
            request_id = given.decode("ascii")
        else:
            request_id = new_request_id()
            if given is not None:
                headers = [(k, v) for k, v in headers if k != b"x-request-id"]
            scope["headers"] = [*headers, (b"x-request-id", request_id.encode())]
        logs.REQUEST_ID.set(request_id)
        return request_id

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        scope[TRUST_FORWARDED_KEY] = self.trust_forwarded
        port = (scope.get("server") or (None, None))[1]
        own = self.own.get(port) if port is not None else None
        admin = own is not None
        request_id = self._assign_request_id(scope) if self.request_ids else None
        tracing = self.tracing
        span = tracing.start(scope) if tracing is not None and not admin else None
        exchange = _Exchange(send, request_id, None if admin else self.drain, scope["method"])
        trail = self.audit
        if trail is not None and not admin:
            exchange.audit = trail.begin(scope, request_id, span)
        cut = False
        try:
            if own is not None:
                exchange.route, answer = own
                await answer(scope, receive, exchange)
            elif trail is not None and trail.refused(scope):
                await send_error(exchange, 503, "audit_unavailable", trail.UNAVAILABLE)
            else:
                await self._dispatch(scope, receive, exchange, port)
        except asyncio.CancelledError:
            # Cancelled by the drain (an event stream stopped between events), or by the server
            # for what still runs when the grace period ends (never on client disconnects):
            # end the stream cleanly, so the client sees it close and can resume elsewhere;
            # what the grace period cut is said in one line.
            stream = exchange.stream
            cut = stream is None or not stream.stopped
            if not cut and exchange.task is not None:
                exchange.task.uncancel()  # the drain's own cancellation, handled here
            await exchange.end_cleanly()
        except Exception as exc:
            log.exception("unhandled error serving %s %s", scope["method"], scope["path"])
            if not exchange.started:
                # The answer is the gateway's 500, whatever a stage had allowed.
                audit.deny(scope, audit.GATEWAY, audit.failure(exc))
                await send_error(
                    exchange,
                    500,
                    "server_error",
                    "the gateway failed to handle this request; see its log",
                )
        finally:
            exchange.forget_stream()
            # Taken before it is written: a line is written once, even if writing it fails.
            line, exchange.audit = exchange.audit, None
            if line is not None:
                line.write(exchange.status)
            self._record(scope, exchange, time.perf_counter() - started, cut)
            if span is not None and tracing is not None:
                tracing.end(span, exchange.status, exchange.route)

    async def _dispatch(
        self, scope: Scope, receive: Receive, exchange: _Exchange, port: int | None
    ) -> None:
        """The request's checks, then the matching route's pipeline (or 404)."""
        table = self.tables.get(port) if port is not None else None
        if table is None and len(self.tables) == 1 and not self.exact_ports:
            table = next(iter(self.tables.values()))
        refusal = self._refusal(scope)
        if refusal is not None:
            audit.deny(scope, audit.ENTRY_RULES, refusal[2])
            await self._refuse(scope, receive, exchange, table, refusal)
            return
        host = header(scope, b"host")
        entry = (
            table.match(host.decode("latin-1") if host else "", scope["path"]) if table else None
        )
        if entry is None:
            reason = (404, "not_found", f"no HTTPRoute matches {scope['path']} on this listener")
            audit.deny(scope, audit.ROUTING, "no HTTPRoute matches the path on this listener")
            await self._refuse(scope, receive, exchange, table, reason)
            return
        exchange.route = entry.route.route
        if exchange.audit is not None:
            exchange.audit.route = entry.route
        await entry.app(scope, receive, exchange)

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """Why the request is refused before any route sees it, or None."""
        if header_bytes(scope["headers"]) > self.limits.max_header_bytes:
            return (
                431,
                "request_header_fields_too_large",
                f"the request headers exceed {self.limits.max_header_bytes} bytes",
            )
        problem = self.header_rules.problem(scope["headers"])
        if problem is None and "\x00" in scope["path"]:
            # A NUL (%00) would cut the path short for CEL rules, which read up to it.
            problem = "the request path contains a NUL character (%00)"
        return None if problem is None else (400, "invalid_request", problem)

    @staticmethod
    async def _refuse(
        scope: Scope,
        receive: Receive,
        exchange: _Exchange,
        table: RouteTable | None,
        reason: tuple[int, str, str],
    ) -> None:
        """Answer the gateway's own error, readable by a browser page whose origin a CORS
        policy of this listener allows (else it only sees "Failed to fetch")."""
        failing = FailClosed(*reason)
        origins = [v for k, v in scope["headers"] if k == b"origin"]
        cors = None
        if len(origins) == 1 and table is not None:  # a repeated Origin is itself refused
            origin = origins[0]
            host = header(scope, b"host")
            cors = table.cors_for(host.decode("latin-1") if host else "", origin.decode("latin-1"))
        if cors is None:
            await failing(scope, receive, exchange)
        else:
            await CorsFilter(failing, cors)(scope, receive, exchange)

    def _record(self, scope: Scope, exchange: _Exchange, elapsed: float, cut: bool) -> None:
        """One access line (or, for a stream cut at shutdown, one warning) and the metrics."""
        if cut:
            log.warning(
                "%s %s %s cut at shutdown after %.1fs: still running when the grace "
                "period ended (--grace-period)",
                scope["method"],
                scope["path"],
                exchange.status or "-",
                elapsed,
            )
        else:
            claims = scope.get(CLAIMS_KEY)
            if not isinstance(claims, dict):
                claims = {}
            self.access_log.record(
                scope["method"],
                scope["path"],
                exchange.status,
                elapsed,
                claims.get("sub"),
                exchange.request_id,
                claims.get("iss"),
            )
        if self.metrics is not None and exchange.route != "admin":
            self.metrics.request(exchange.route, exchange.status)


class _Exchange:
    """The response side of one request: what was sent, for the log, metrics and shutdown."""

    __slots__ = (
        "audit",
        "complete",
        "drain",
        "method",
        "request_id",
        "route",
        "send",
        "started",
        "status",
        "stream",
        "task",
    )

    def __init__(
        self, send: Send, request_id: str | None, drain: Drain | None = None, method: str = ""
    ):
        self.send = send
        self.request_id = request_id
        self.status = 0
        self.started = False
        self.complete = False
        self.route = "-"
        # The request's audit line, written once the answer starts (or the request ends).
        self.audit: AuditLine | None = None
        # An event stream answered to the client, watched by the drain (None: none, or the
        # gateway's own listeners).
        self.drain = drain
        self.method = method
        self.stream: Stream | None = None
        # The request's own task (stages may send from tasks of theirs): what the drain cancels.
        self.task = asyncio.current_task() if drain is not None else None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if self.request_id is not None:
                # The gateway's id replaces one a backend may have echoed: one value only.
                message = {
                    **message,
                    "headers": [
                        *(h for h in message.get("headers", ()) if h[0] != b"x-request-id"),
                        (b"x-request-id", self.request_id.encode()),
                    ],
                }
            await self.send(message)
            # Only once the server took it: a response it refused was never sent.
            self.status = message["status"]
            line, self.audit = self.audit, None
            if line is not None:
                line.write(self.status)
            if self.drain is not None and _is_event_stream(message):
                self.stream = self.drain.opened(self.task, self.method)
            return
        stream = self.stream
        if stream is None:
            await self.send(message)
            if not message.get("more_body", False):
                self.complete = True
            return
        if stream.stopped:
            return  # ended for the drain: the entry point writes the end
        await self.send(message)
        if not message.get("more_body", False):
            self.complete = True
            self.forget_stream()
        else:
            stream.wrote(message.get("body", b""))

    def forget_stream(self) -> None:
        """The drain no longer watches this exchange's stream (it ended, or the request did)."""
        if self.stream is not None and self.drain is not None:
            self.drain.closed(self.stream)

    async def end_cleanly(self) -> None:
        """End a started response (a stream the drain stopped, or one cut when the grace period
        ended), within a bounded wait; a stream stopped between events gets `retry:` first."""
        self.forget_stream()
        if self.started and not self.complete:
            stream = self.stream
            body = RETRY if stream is not None and stream.between_events() else b""
            self.complete = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self.send({"type": "http.response.body", "body": body, "more_body": False}),
                    SHUTDOWN_END_WAIT,
                )


def _names(snapshot: Snapshot) -> tuple[frozenset[str], frozenset[str]]:
    """The routes and policies a snapshot serves, as the metrics label them."""
    routes = [route for rows in snapshot.listeners.values() for route in rows]
    return (
        frozenset(route.route for route in routes),
        frozenset(route.policy.key for route in routes if route.policy is not None),
    )


def _is_event_stream(start: Message) -> bool:
    """Whether a response head announces an event stream the drain can read and end: one sent
    compressed has no event boundaries to see, and no field can be added to it."""
    headers = start.get("headers", ())
    for name, value in headers:
        # The length first, and out at the content type: this runs for every response.
        if len(name) == 12 and name.lower() == b"content-type":
            if value[:17].lower() != b"text/event-stream":
                return False
            return not any(
                len(other) == 16
                and other.lower() == b"content-encoding"
                and coding.strip().lower() not in (b"", b"identity")
                for other, coding in headers
            )
    return False
