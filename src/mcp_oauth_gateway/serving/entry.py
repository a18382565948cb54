"""The gateway's own steps of a request's way, before its route's (`stages.ENTRY` declares their
order and when each runs): each is built once per process from the serve options
(`EntryContext`), and per request only looks things up.

From the access line on, every step is handed the request's `Exchange` as its `send`."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import cast

from .. import audit, logs
from ..asgi import (
    CLAIMS_KEY,
    TRUST_FORWARDED_KEY,
    ASGIApp,
    Limits,
    Receive,
    Scope,
    Send,
    header,
    header_bytes,
    send_error,
)
from ..dataplane.access_log import AccessLog
from ..dataplane.cors import CorsFilter
from ..dataplane.headers import HeaderRules
from ..dataplane.metrics import Metrics
from ..dataplane.routing import RouteTable
from ..dataplane.tracing import RequestTracing
from .audit_trail import AuditTrail
from .drain import Drain
from .exchange import Exchange
from .route_context import FailClosed

log = logging.getLogger("mcp_oauth_gateway")
# The audit trail's names of the steps that refuse before any route's stage runs (as
# `stages.ENTRY` spells them; a unit test holds the two together).
AUDIT = "audit"
ENTRY_RULES = "entry-rules"
ROUTING = "routing"
# Ids from callers are kept only when short and plain, so they cannot forge log structure.
REQUEST_ID_SHAPE = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_Step = Callable[[Scope, Receive, Exchange], Awaitable[None]]


def _app(step: _Step) -> ASGIApp:
    """A step as the app the step before it calls (with the request's exchange as `send`)."""
    return cast(ASGIApp, step)


class RouteTables:
    """The route table of each listener port, replaced whole on every install: requests in
    flight keep the tables they started with."""

    __slots__ = ("by_port", "exact_ports")

    def __init__(self, exact_ports: bool):
        self.by_port: dict[int, RouteTable] = {}
        # From files, one listener's table also answers requests whose port the server did not
        # report; in a cluster, listeners come and go, and a connection left open on a port no
        # Gateway has any more must not reach another listener's routes.
        self.exact_ports = exact_ports

    def of(self, scope: Scope) -> RouteTable | None:
        """The table of the listener port the request came in on, if any."""
        tables = self.by_port
        port = (scope.get("server") or (None, None))[1]
        table = tables.get(port) if port is not None else None
        if table is None and len(tables) == 1 and not self.exact_ports:
            table = next(iter(tables.values()))
        return table


@dataclass(frozen=True)
class EntryContext:
    """What the gateway's own steps are built from, once per process."""

    routes: RouteTables
    trust_forwarded: bool
    limits: Limits
    drain: Drain
    access_log: AccessLog
    # Whether requests get an id, and whether a caller's own X-Request-Id is kept.
    request_ids: bool
    caller_ids: bool
    # The gateway's own listeners by port: the name in access lines, and the app.
    own: Mapping[int, tuple[str, ASGIApp]]
    metrics: Metrics | None = None
    tracing: RequestTracing | None = None
    audit: AuditTrail | None = None


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


class AccessLine:
    """Hands the request its exchange; once it ends, one access line (a warning for a stream
    cut at shutdown) and the request's metrics."""

    __slots__ = ("access_log", "app", "drain", "metrics")

    def __init__(self, ctx: EntryContext, app: ASGIApp):
        self.app = app
        self.drain = ctx.drain
        self.access_log = ctx.access_log
        self.metrics = ctx.metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        exchange = Exchange(send, self.drain, scope["method"])
        try:
            await self.app(scope, receive, exchange)
        finally:
            self._record(scope, exchange, time.perf_counter() - started)

    def _record(self, scope: Scope, exchange: Exchange, elapsed: float) -> None:
        if exchange.cut:
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


class RequestId:
    """The caller's `X-Request-Id` when well-formed (and, with the audit trail, sent by a
    trusted proxy), else a new one; the backend sees it, the answer carries it."""

    __slots__ = ("app", "caller_ids")

    def __init__(self, ctx: EntryContext, app: ASGIApp):
        self.app = app
        # An audit line's request id must name one request: a caller's own X-Request-Id (which
        # anyone may set to another request's id, or to the ids the gateway hands out next) is
        # kept only from the proxy in front (--trust-forwarded-headers), else replaced.
        self.caller_ids = ctx.caller_ids

    def __call__(self, scope: Scope, receive: Receive, send: Exchange) -> Awaitable[None]:
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
        send.request_id = request_id
        return self.app(scope, receive, send)


def request_id(ctx: EntryContext, app: ASGIApp) -> ASGIApp:
    """The request-id step."""
    return _app(RequestId(ctx, app))


class OwnListeners:
    """Requests to the gateway's own listeners (admin, health) go to their own apps."""

    __slots__ = ("app", "own")

    def __init__(self, own: Mapping[int, tuple[str, ASGIApp]], app: ASGIApp):
        self.app = app
        self.own = own

    def __call__(self, scope: Scope, receive: Receive, send: Exchange) -> Awaitable[None]:
        port = (scope.get("server") or (None, None))[1]
        own = self.own.get(port) if port is not None else None
        if own is None:
            return self.app(scope, receive, send)
        send.route, answer = own
        send.undrained()
        return answer(scope, receive, send)


def own_listeners(ctx: EntryContext, app: ASGIApp) -> ASGIApp:
    """The split: each own listener's app behind the 500 handler, the rest to `app`."""
    own = {port: (name, server_error(ctx, answer)) for port, (name, answer) in ctx.own.items()}
    return _app(OwnListeners(own, app))


class Tracing:
    """The request's span: started with the caller's trace as parent, ended with the answer."""

    __slots__ = ("app", "tracing")

    def __init__(self, tracing: RequestTracing, app: ASGIApp):
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Exchange) -> None:
        span = send.span = self.tracing.start(scope)
        try:
            await self.app(scope, receive, send)
        finally:
            self.tracing.end(span, send.status, send.route)


def tracing(ctx: EntryContext, app: ASGIApp) -> ASGIApp:
    """The tracing step (`--tracing otlp`)."""
    assert ctx.tracing is not None
    return _app(Tracing(ctx.tracing, app))


class ServerError:
    """What no stage handled: an error is the gateway's 500 (whatever a stage had allowed); a
    cancelled request's started answer is ended cleanly."""

    __slots__ = ("app",)

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Exchange) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            # Cancelled by the drain (an event stream stopped between events), or by the server
            # for what still runs when the grace period ends (never on client disconnects):
            # end the stream cleanly, so the client sees it close and can resume elsewhere;
            # what the grace period cut is said in one line.
            stream = send.stream
            send.cut = stream is None or not stream.stopped
            if not send.cut and send.task is not None:
                send.task.uncancel()  # the drain's own cancellation, handled here
            await send.end_cleanly()
        except Exception as exc:
            log.exception("unhandled error serving %s %s", scope["method"], scope["path"])
            if not send.started:
                audit.deny(scope, audit.GATEWAY, audit.failure(exc))
                await send_error(
                    send,
                    500,
                    "server_error",
                    "the gateway failed to handle this request; see its log",
                )
        finally:
            if send.stream is not None or send.audit is not None:
                send.finish()


def server_error(ctx: EntryContext, app: ASGIApp) -> ASGIApp:
    """The 500 handler around `app`."""
    return _app(ServerError(app))


class Audit:
    """Begins the request's audit record; refuses it (503) while the log cannot be written and
    the gateway may not serve unaudited (`--audit-required`)."""

    __slots__ = ("app", "trail")

    def __init__(self, trail: AuditTrail, app: ASGIApp):
        self.app = app
        self.trail = trail

    def __call__(self, scope: Scope, receive: Receive, send: Exchange) -> Awaitable[None]:
        trail = self.trail
        send.audit = trail.begin(scope, send.request_id, send.span)
        if trail.unwritable():
            audit.deny(scope, AUDIT, "the audit log cannot be written (--audit-required)")
            return send_error(send, 503, "audit_unavailable", trail.UNAVAILABLE)
        return self.app(scope, receive, send)


def audit_trail(ctx: EntryContext, app: ASGIApp) -> ASGIApp:
    """The audit step (`--audit-log`)."""
    assert ctx.audit is not None
    return _app(Audit(ctx.audit, app))


class EntryRules:
    """One meaning per request: refuses what the header rules, the header size limit and the
    path rules do not take (400, 431), and marks whether forwarded headers are trusted."""

    __slots__ = ("app", "header_rules", "max_header_bytes", "routes", "trust_forwarded")

    def __init__(self, ctx: EntryContext, app: ASGIApp):
        self.app = app
        self.trust_forwarded = ctx.trust_forwarded
        self.header_rules = HeaderRules(ctx.trust_forwarded)
        self.max_header_bytes = ctx.limits.max_header_bytes
        self.routes = ctx.routes

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        scope[TRUST_FORWARDED_KEY] = self.trust_forwarded
        refusal = self.refusal(scope)
        if refusal is None:
            return self.app(scope, receive, send)
        audit.deny(scope, ENTRY_RULES, refusal[2])
        return refuse(scope, receive, send, self.routes.of(scope), refusal)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """Why the request is refused before any route sees it, or None."""
        if header_bytes(scope["headers"]) > self.max_header_bytes:
            return (
                431,
                "request_header_fields_too_large",
                f"the request headers exceed {self.max_header_bytes} bytes",
            )
        problem = self.header_rules.problem(scope["headers"])
        if problem is None and "\x00" in scope["path"]:
            # A NUL (%00) would cut the path short for CEL rules, which read up to it.
            problem = "the request path contains a NUL character (%00)"
        return None if problem is None else (400, "invalid_request", problem)


class Routing:
    """Host and path to the route rule (404 when none matches), whose pipeline answers."""

    __slots__ = ("routes",)

    def __init__(self, ctx: EntryContext):
        self.routes = ctx.routes

    def __call__(self, scope: Scope, receive: Receive, send: Exchange) -> Awaitable[None]:
        # RouteTables.of, inline: this runs for every request.
        routes = self.routes
        port = (scope.get("server") or (None, None))[1]
        table = routes.by_port.get(port) if port is not None else None
        if table is None:
            table = routes.of(scope)
        host = header(scope, b"host")
        entry = (
            table.match(host.decode("latin-1") if host else "", scope["path"]) if table else None
        )
        if entry is None:
            reason = (404, "not_found", f"no HTTPRoute matches {scope['path']} on this listener")
            audit.deny(scope, ROUTING, "no HTTPRoute matches the path on this listener")
            return refuse(scope, receive, send, table, reason)
        send.route = entry.route.route
        if send.audit is not None:
            send.audit.route = entry.route
        return entry.app(scope, receive, send)


def routing(ctx: EntryContext) -> ASGIApp:
    """The last step: the route's pipeline answers."""
    return _app(Routing(ctx))


def refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    table: RouteTable | None,
    reason: tuple[int, str, str],
) -> Awaitable[None]:
    """Answer the gateway's own error, readable by a browser page whose origin a CORS
    policy of this listener allows (else it only sees "Failed to fetch")."""
    failing: ASGIApp = FailClosed(*reason)
    origins = [v for k, v in scope["headers"] if k == b"origin"]
    if len(origins) == 1 and table is not None:  # a repeated Origin is itself refused
        host = header(scope, b"host")
        cors = table.cors_for(host.decode("latin-1") if host else "", origins[0].decode("latin-1"))
        if cors is not None:
            failing = CorsFilter(failing, cors)
    return failing(scope, receive, send)
