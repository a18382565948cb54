"""The audit trail of one gateway process (`serve --audit-log`): a record in every request's
scope, and one line per request written once its answer starts (or it ends without one), from
what the stages recorded (`audit`), the route, the verified caller and the answer's status."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from .. import audit
from ..asgi import AUDIT_KEY, CLAIMS_KEY, Scope
from ..controlplane.snapshot import CompiledRoute
from ..logs import iso_second, timestamp
from .audit_sink import AuditSink, OtlpAudit
from .options import ServeOptions

log = logging.getLogger("mcp_oauth_gateway.audit")
# A route's answering stage, and the reason of an `allow` that reached it (`stages.passed`).
Passed = Callable[[CompiledRoute], tuple[str, str]]
CALLER_MEMO = 4096  # callers remembered by their claims (all forgotten when full)


class AuditTrail:
    """Begins each request's record and writes its line to the sink."""

    UNAVAILABLE = (
        "the audit log cannot be written, and this gateway refuses to serve requests "
        "unaudited (--audit-required); try again shortly"
    )

    def __init__(self, sink: AuditSink, passed: Passed, required: bool = False):
        self.sink = sink
        self.required = required
        self._passed_of = passed
        # Per route (by identity, for the current tables): its answering stage, and the reason
        # of an `allow` that reached it.
        self._passed: dict[int, tuple[str, str]] = {}
        self._signals: asyncio.AbstractEventLoop | None = None
        self._second = -1
        self._stamp = ""
        # id(claims) -> (claims, caller): the authentication stage hands a cached token's
        # claims as the same dict every time; holding it keeps its id from being reused.
        self._callers: dict[int, tuple[object, dict[str, str] | None]] = {}

    @classmethod
    def of(cls, options: ServeOptions, passed: Passed) -> AuditTrail:
        """The trail `serve`'s options ask for (OTLP log records too when tracing is on)."""
        assert options.audit_log is not None
        otlp = OtlpAudit() if options.tracing else None
        return cls(AuditSink(options.audit_log, otlp), passed, options.audit_required)

    def start(self) -> None:
        """Start writing, and reopen the file on SIGHUP (from within the event loop)."""
        self.sink.start()
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, self.sink.reopen)
        except (NotImplementedError, RuntimeError, ValueError) as exc:
            # Not the main thread (an embedding server): rotation then needs a restart.
            log.warning("audit log: SIGHUP cannot be handled here (%s); no reopen on SIGHUP", exc)
            return
        self._signals = loop

    def stop(self) -> None:
        """Write what is left and stop."""
        if self._signals is not None:
            with contextlib.suppress(Exception):
                self._signals.remove_signal_handler(signal.SIGHUP)
            self._signals = None
        self.sink.stop()

    def forget_routes(self) -> None:
        """New route tables: the reasons kept per route are for the old ones."""
        self._passed = {}

    def begin(self, scope: Scope, request_id: str | None, span: object) -> AuditLine:
        """The request's record (in its scope) and the line it will become."""
        record = audit.AuditRecord()
        scope[AUDIT_KEY] = record
        return AuditLine(self, scope, record, request_id, span)

    def unwritable(self) -> bool:
        """Whether requests are refused because the audit log cannot be written."""
        return self.required and not self.sink.healthy

    def now(self) -> str:
        """The time of a line (RFC 3339 UTC, milliseconds), its second formatted once."""
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second, self._stamp = second, iso_second(second)
        return timestamp(now, self._stamp)

    def caller(
        self, claims: object, client_id: str | None, user: dict[str, str] | None = None
    ) -> dict[str, str] | None:
        """The line's `caller`, worked out once per verified token's claims."""
        if client_id is not None or user is not None or not isinstance(claims, dict):
            return audit.caller_of(claims, client_id, user)
        hit = self._callers.get(id(claims))
        if hit is not None and hit[0] is claims:
            return hit[1]
        found = audit.caller_of(claims, None)
        if len(self._callers) >= CALLER_MEMO:
            self._callers.clear()
        self._callers[id(claims)] = (claims, found)
        return found

    def passed(self, route: CompiledRoute) -> tuple[str, str]:
        """The route's answering stage (the reverse proxy, or federation), and why a request
        that reached it was allowed: the stages it passed."""
        known = self._passed.get(id(route))
        if known is None:
            known = self._passed[id(route)] = self._passed_of(route)
        return known


class AuditLine:
    """One request's line: written once, when its answer starts or it ends without one."""

    __slots__ = ("record", "request_id", "route", "scope", "span", "trail")

    def __init__(
        self,
        trail: AuditTrail,
        scope: Scope,
        record: audit.AuditRecord,
        request_id: str | None,
        span: Any,
    ):
        self.trail = trail
        self.scope = scope
        self.record = record
        self.request_id = request_id
        self.span = span
        self.route: CompiledRoute | None = None

    def write(self, status: int) -> None:
        """Write the line for an answer with `status` (0: none was sent). A failure here
        (a bug: the sink never raises) is logged and counted, never the request's failure."""
        try:
            self.trail.sink.write(self.fields(status), self.span)
        except Exception:
            self.trail.sink.write_errors += 1
            log.exception("audit line of request %s could not be written", self.request_id)

    def fields(self, status: int) -> dict[str, object]:
        """The line's fields (every field present, null when it does not apply)."""
        record = self.record
        scope = self.scope
        route = self.route
        decision, stage, reason = audit.decision_of(record, status)
        if decision == audit.ALLOW and reason is None and route is not None:
            answering, passed = self.trail.passed(route)
            if stage == answering:
                reason = passed
                if record.notes is not None:
                    reason = "; ".join([reason, *record.notes])
        policy = route.policy if route is not None else None
        trail = self.trail
        return {
            "time": trail.now(),
            "request_id": self.request_id,
            "trace_id": _trace_id(self.span),
            "route": route.route if route is not None else None,
            "policy": policy.key if policy is not None else None,
            "decision": decision,
            "stage": stage,
            "reason": audit.capped(reason, audit.MAX_REASON) if reason is not None else None,
            "caller": _bound(
                trail.caller(scope.get(CLAIMS_KEY), record.client_id, record.user),
                record.dpop_jkt,
            ),
            "mcp": record.mcp,
            "event": record.event,
            "method": audit.capped(scope["method"], 32),
            "path": audit.capped(scope["path"]),
            "status": status,
        }


def _bound(caller: dict[str, str] | None, jkt: str | None) -> dict[str, str] | None:
    """The caller with `dpop_jkt` on a DPoP-bound call (a copy: callers are memoized)."""
    if jkt is None or caller is None:
        return caller
    return {**caller, "dpop_jkt": jkt}


def _trace_id(span: Any) -> str | None:
    """The W3C trace id of the request's span (32 hex digits), or None without tracing or
    without a valid one (all zeros: an invalid span, which no trace has)."""
    if span is None:
        return None
    trace_id = span.get_span_context().trace_id
    return f"{trace_id:032x}" if trace_id else None
