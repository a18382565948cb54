"""Where audit lines go (`serve --audit-log PATH|-`): a file (reopened on SIGHUP, for log
rotation) or standard output, and with `--tracing otlp` also OTLP log records.

The request path only encodes the line and appends it to a bounded list; a writer thread writes
batches, so a slow disk never stalls the event loop. Nothing is lost silently: a line that does
not fit in the list is counted, the next batch starts with a line saying how many were lost, and
a write that fails is logged, counted and retried with the same lines (the oldest dropped, and
counted, past the bound). `healthy` is what `--audit-required` reads: while it is false the
gateway refuses requests rather than serve them unaudited."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..logs import json_line, timestamp
from .audit_file import STDOUT, AuditFile
from .audit_file import check_path as check_path
from .audit_file import exposure as exposure

log = logging.getLogger("mcp_oauth_gateway.audit")

FLUSH_INTERVAL = 0.2
MAX_PENDING = 100_000  # lines waiting to be written (or to be written again)
# Longest line in bytes, newline included: what a pipe writes whole (PIPE_BUF on Linux).
MAX_LINE = 4096
# The fields whose values a request chooses, cut shorter when a line would be longer.
CHOSEN = frozenset({"reason", "caller", "mcp", "method", "path"})


def fitted(fields: dict[str, object]) -> str:
    """The line of `fields` within MAX_LINE bytes, newline included: the values a request
    chooses (`CHOSEN`) cut shorter and shorter until it fits. Each is capped already, but JSON
    writes some characters six-fold (`\\u2028`), and a longer line is not written whole to a
    pipe that several workers share: two lines would interleave, both lost. What the gateway
    decided (decision, stage, status, route, the request id) is never cut."""
    cap = 128
    while True:
        cut = {k: _cut(v, cap) if k in CHOSEN else v for k, v in fields.items()}
        line = json_line(cut)
        if cap <= 8 or len(line.encode("utf-8", "replace")) < MAX_LINE:
            return line
        cap //= 2


def _cut(value: object, cap: int) -> object:
    """`value`'s text (in a map: each value's) cut to `cap` characters, ending in "…"."""
    if isinstance(value, str):
        return value if len(value) <= cap else value[: cap - 1] + "…"
    if isinstance(value, dict):
        return {k: _cut(v, cap) for k, v in value.items()}
    return value


class AuditSink:
    """Queues audit lines and writes them from a thread; `reopen()` is safe from a signal."""

    def __init__(self, path: str, otlp: Any = None, max_pending: int = MAX_PENDING):
        self.path = path
        self.otlp = otlp
        self.max_pending = max_pending
        self._file = AuditFile(path)
        # A deque: the request path appends while the writer thread takes, without a lock.
        self._pending: deque[str] = deque()
        self._retry: list[str] = []
        # A line a failing write cut in two: the file it began in, its rest, the whole line.
        self._torn: tuple[tuple[int, int] | None, bytes, str] | None = None
        self._dropped = 0
        # `_dropped` is added to by the event loop and taken by the writer thread: `+=` is not
        # atomic across threads, and a count lost there would be lines lost silently.
        self._counts = threading.Lock()
        self._failing = False
        self._reopen = False
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.written = 0
        self.dropped_total = 0
        self.write_errors = 0
        self.otlp_errors = 0
        self.files_lost = 0

    @property
    def healthy(self) -> bool:
        """Whether lines are being written: the last write worked and the list has room."""
        return not self._failing and len(self._pending) + len(self._retry) < self.max_pending

    def start(self) -> None:
        """Open the file and start the writer thread (idempotent)."""
        if self._thread is None:
            self._stopped = False
            self._thread = threading.Thread(target=self._run, name="audit-log", daemon=True)
            self._thread.start()

    def write(self, fields: dict[str, object], span: Any = None) -> None:
        """Queue one line (counted as dropped when the list is full); while serving it never
        blocks, after `stop` it is written at once."""
        if len(self._pending) >= self.max_pending:
            self._count_dropped(1)
            return
        line = json_line(fields)
        # Below 1024 characters a line is within MAX_LINE bytes (UTF-8: at most 4 per one).
        if len(line) >= MAX_LINE // 4 and len(line.encode("utf-8", "replace")) >= MAX_LINE:
            line = fitted(fields)
        self._pending.append(line + "\n")
        if self._stopped and self._thread is None:
            # After `stop`: a request cut at shutdown ends after the lifespan stopped the sink,
            # and no thread is left to write its line.
            self.flush()
        if self.otlp is not None:
            try:
                self.otlp.emit(fields, span)
            except Exception as exc:  # a copy: its failure must not fail the request
                self.otlp_errors += 1
                if self.otlp_errors == 1:
                    log.error("audit log: OTLP log record not emitted: %r", exc)

    def _count_dropped(self, count: int) -> None:
        with self._counts:
            self._dropped += count
            self.dropped_total += count

    def reopen(self) -> None:
        """Reopen the file at its path before the next write (SIGHUP, after rotation)."""
        self._reopen = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()
            try:
                self.flush()
            except Exception:
                # A bug must not end the thread: every later line would wait for it forever.
                self.write_errors += 1
                self._failing = True
                log.exception("audit log %s: writing failed unexpectedly", self._shown)

    def flush(self) -> None:
        """Write what is pending (the thread calls it; so does `stop`)."""
        self._check_file()
        pending = self._pending
        batch = [pending.popleft() for _ in range(len(pending))]
        with self._counts:
            dropped, self._dropped = self._dropped, 0
        if dropped:
            why = "the audit log could not keep up or could not be written"
            batch.insert(0, _event_line("audit-lines-dropped", dropped=dropped, reason=why))
        lines = self._retry + batch
        self._retry = []
        done = 0
        if (lines or self._torn) and self._file.fd is not None and self._finish_torn(lines):
            done = self._write_lines(lines)
        self.written += done
        if done < len(lines) or self._torn is not None or self._file.fd is None:
            self._keep(lines[done:])
            return
        if self._failing:
            # Open, and nothing waits: lines can be written again (--audit-required serves).
            self._failing = False
            log.warning("audit log %s is written again", self._shown)

    def _check_file(self) -> None:
        """Open the file when it is not open or a SIGHUP asked to, and anew when it is no longer
        the file at its path (once per batch: a stat beside the write): removed or replaced,
        its lines would reach no one who reads the path. That is counted, logged, and said by a
        line at the head of the file now at the path."""
        if not self._reopen and self._file.fd is not None:
            gone = self._file.gone()
            if gone is None:
                return
            self.files_lost += 1
            log.warning("audit log %s %s while written; opening its path anew", self._shown, gone)
            said = f"the audit log {gone} while the gateway wrote it; opened anew at its path"
            self._retry.insert(0, _event_line("audit-log-reopened", reason=said))
        self._reopen = False
        why = self._file.open()
        if why is not None:
            self._fail(why)

    def _write_lines(self, lines: list[str]) -> int:
        """Write `lines`; how many were written (a line cut short by a failing write counts:
        the rest of it is kept in `_torn`, to be finished first). A file takes them in one
        write (appends of several workers do not interleave); standard output, often a pipe
        that several workers share, one line per write (a pipe keeps writes under 4 KiB
        whole)."""
        encoded = [line.encode("utf-8", "replace") for line in lines]
        groups = [encoded] if self.path != STDOUT else [[line] for line in encoded]
        done = 0
        for group in groups:
            data = b"".join(group)
            placed = self._write(data)
            if placed < len(data):
                return done + self._tear(group, placed, lines[done:])
            done += len(group)
        return done

    def _tear(self, group: list[bytes], placed: int, lines: list[str]) -> int:
        """How many of `group`'s lines a write that stopped after `placed` bytes began; the
        rest of a line it cut in two is kept, with where it went, to be finished there (a
        line whose rest were written anew would leave a torn line that eats the next)."""
        for index, line in enumerate(group):
            if placed < len(line):
                if placed == 0:
                    return index
                self._torn = (self._file.where(), line[placed:], lines[index])
                self.written -= 1  # counted once finished
                return index + 1
            placed -= len(line)
        return len(group)

    def _finish_torn(self, lines: list[str]) -> bool:
        """Write the rest of a line cut in two, in the file it began in; in a file that
        replaced that one (rotated meanwhile), the line is written whole, first in `lines`.
        False when the rest could not be written (still `_torn`)."""
        if self._torn is None:
            return True
        where, rest, whole = self._torn
        self._torn = None
        if where is None or self._file.where() != where:
            lines.insert(0, whole)
            return True
        placed = self._write(rest)
        if placed < len(rest):
            self._torn = (where, rest[placed:], whole)
            return False
        self.written += 1
        return True

    def _write(self, data: bytes) -> int:
        """Write `data`; how many of its bytes were written (all, unless a write failed)."""
        view = memoryview(data)
        placed = 0
        try:
            while placed < len(data):
                placed += self._file.write(view[placed:])
        except OSError as exc:
            self._fail(f"cannot be written: {exc}")
            # A new descriptor at the next attempt: the file may have been removed or remounted.
            self._reopen = True
        return placed

    def _keep(self, lines: list[str]) -> None:
        """Hold lines that could not be written for the next attempt, within the bound."""
        excess = len(lines) + len(self._pending) - self.max_pending
        if excess > 0:
            self._count_dropped(excess)
            lines = lines[excess:]
        self._retry = lines

    def _fail(self, why: str) -> None:
        self.write_errors += 1
        if not self._failing:
            log.error("audit log %s %s; lines are kept and retried", self._shown, why)
        self._failing = True

    @property
    def _shown(self) -> str:
        return "(standard output)" if self.path == STDOUT else self.path

    def stop(self) -> None:
        """Write what is left and stop the thread."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self.flush()
        lost = len(self._retry) + len(self._pending) + (self._torn is not None)
        if lost:
            # The last word on them: counted, and said, rather than gone with the process.
            self._count_dropped(lost)
            log.error(
                "%d audit lines could not be written before the gateway stopped (%s)",
                lost,
                self._shown,
            )
            self._retry, self._torn = [], None
        self._file.close()
        if self.otlp is not None:
            self.otlp.shutdown()

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """The sink's metrics (a prometheus_client collector), read at scrape time."""
        yield CounterMetricFamily(
            "mcp_gateway_audit_lines", "Audit lines written", value=self.written
        )
        yield CounterMetricFamily(
            "mcp_gateway_audit_lines_dropped",
            "Audit lines lost: the list of lines to write was full (see the audit log's "
            "audit-lines-dropped lines)",
            value=self.dropped_total,
        )
        yield CounterMetricFamily(
            "mcp_gateway_audit_write_errors",
            "Failed attempts to open or write the audit log",
            value=self.write_errors,
        )
        yield CounterMetricFamily(
            "mcp_gateway_audit_file_reopened",
            "Times the audit log was found removed or replaced at its path while written, and "
            "opened anew there",
            value=self.files_lost,
        )
        yield CounterMetricFamily(
            "mcp_gateway_audit_otlp_errors",
            "Audit lines the OTLP log records could not carry (the line itself was written)",
            value=self.otlp_errors,
        )
        yield GaugeMetricFamily(
            "mcp_gateway_audit_healthy",
            "1 while audit lines are written, 0 while the audit log cannot keep up or be written",
            value=1.0 if self.healthy else 0.0,
        )


def _event_line(event: str, **fields: object) -> str:
    """A line of the sink's own: what happened to the audit log itself."""
    return json_line({"time": timestamp(time.time()), "event": event, **fields}) + "\n"


class OtlpAudit:
    """Audit lines as OTLP log records (event name `mcp_oauth_gateway.audit`), exported in
    batches by the OpenTelemetry SDK's own thread, as set by the `OTEL_EXPORTER_OTLP_*`
    variables."""

    def __init__(self, exporter: Any = None) -> None:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

            exporter = OTLPLogExporter()
        self.provider = LoggerProvider(
            resource=Resource.create({"service.name": "mcp-oauth-gateway"})
        )
        self.provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        self.logger = self.provider.get_logger("mcp_oauth_gateway.audit")

    def emit(self, fields: dict[str, object], span: Any = None) -> None:
        """One log record: the line as its body, the fields to filter on as attributes, and
        the request's trace and span (`span`), so a tracing backend links the two."""
        from opentelemetry.trace import set_span_in_context

        body = {k: v for k, v in fields.items() if v is not None}
        attributes = {
            f"audit.{k}": v for k, v in body.items() if isinstance(v, str | int) and k != "time"
        }
        self.logger.emit(
            timestamp=time.time_ns(),
            context=set_span_in_context(span) if span is not None else None,
            body=body,  # type: ignore[arg-type]  # a map of text, numbers and maps
            attributes=attributes,
            event_name="mcp_oauth_gateway.audit",
        )

    def shutdown(self) -> None:
        """Export what is left."""
        self.provider.shutdown()
