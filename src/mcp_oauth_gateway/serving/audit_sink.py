"""Where audit lines go (`serve --audit-log PATH|-`): a file (reopened on SIGHUP, for log
rotation) or standard output, and with `--tracing otlp` also OTLP log records.

The request path only encodes the line and appends it to a bounded list; a writer thread writes
batches, so a slow disk never stalls the event loop. Nothing is lost silently: a line that does
not fit in the list is counted, the next batch starts with a line saying how many were lost, and
a write that fails is logged, counted and retried with the same lines (the oldest dropped, and
counted, past the bound). `healthy` is what `--audit-required` reads: while it is false the
gateway refuses requests rather than serve them unaudited."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..logs import json_line, timestamp

log = logging.getLogger("mcp_oauth_gateway.audit")

STDOUT = "-"
FLUSH_INTERVAL = 0.2
MAX_PENDING = 100_000  # lines waiting to be written (or to be written again)
FILE_MODE = 0o640
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


def open_audit_file(path: str) -> int:
    """An append-only descriptor of the audit file (created when missing); OSError if not."""
    if path == STDOUT:
        return os.dup(sys.stdout.fileno())
    return os.open(path, _OPEN_FLAGS, FILE_MODE)


def check_path(path: str) -> None:
    """Raise OSError unless `path` can be opened for appending (checked before serving)."""
    os.close(open_audit_file(path))


class AuditSink:
    """Queues audit lines and writes them from a thread; `reopen()` is safe from a signal."""

    def __init__(self, path: str, otlp: Any = None, max_pending: int = MAX_PENDING):
        self.path = path
        self.otlp = otlp
        self.max_pending = max_pending
        self._fd: int | None = None
        # A deque: the request path appends while the writer thread takes, without a lock.
        self._pending: deque[str] = deque()
        self._retry: list[str] = []
        self._dropped = 0
        self._failing = False
        self._reopen = False
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.written = 0
        self.dropped_total = 0
        self.write_errors = 0

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

    def write(self, fields: dict[str, object]) -> None:
        """Queue one line (never blocks; counted as dropped when the list is full)."""
        if len(self._pending) >= self.max_pending:
            self._dropped += 1
            self.dropped_total += 1
            return
        self._pending.append(json_line(fields) + "\n")
        if self.otlp is not None:
            self.otlp.emit(fields)

    def reopen(self) -> None:
        """Reopen the file at its path before the next write (SIGHUP, after rotation)."""
        self._reopen = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write what is pending (the thread calls it; so does `stop`)."""
        if self._reopen or self._fd is None:
            self._reopen = False
            self._open()
        pending = self._pending
        batch = [pending.popleft() for _ in range(len(pending))]
        if self._dropped:
            batch.insert(0, self._gap_line(self._dropped))
            self._dropped = 0
        lines = self._retry + batch
        self._retry = []
        if not lines:
            return
        done = self._write_lines(lines) if self._fd is not None else 0
        self.written += done
        if done < len(lines):
            self._keep(lines[done:])
            return
        if self._failing:
            self._failing = False
            log.warning("audit log %s is written again", self._shown)

    def _write_lines(self, lines: list[str]) -> int:
        """Write `lines`; how many were written. A file takes them in one write (appends of
        several workers do not interleave); standard output, often a pipe that several workers
        share, one line per write (a pipe keeps writes under 4 KiB whole)."""
        if self.path != STDOUT:
            return len(lines) if self._write("".join(lines).encode("utf-8", "replace")) else 0
        for done, line in enumerate(lines):
            if not self._write(line.encode("utf-8", "replace")):
                return done
        return len(lines)

    def _write(self, data: bytes) -> bool:
        assert self._fd is not None
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as exc:
            self._fail(f"cannot be written: {exc}")
            # A new descriptor at the next attempt: the file may have been removed or remounted.
            self._reopen = True
            return False
        return True

    def _keep(self, lines: list[str]) -> None:
        """Hold lines that could not be written for the next attempt, within the bound."""
        excess = len(lines) + len(self._pending) - self.max_pending
        if excess > 0:
            self.dropped_total += excess
            self._dropped += excess
            lines = lines[excess:]
        self._retry = lines

    def _open(self) -> None:
        old = self._fd
        try:
            self._fd = open_audit_file(self.path)
        except OSError as exc:
            self._fd = None
            self._fail(f"cannot be opened: {exc}")
        if old is not None:
            with contextlib.suppress(OSError):
                os.close(old)

    def _fail(self, why: str) -> None:
        self.write_errors += 1
        if not self._failing:
            log.error("audit log %s %s; lines are kept and retried", self._shown, why)
        self._failing = True

    @property
    def _shown(self) -> str:
        return "(standard output)" if self.path == STDOUT else self.path

    @staticmethod
    def _gap_line(count: int) -> str:
        return (
            json_line(
                {
                    "time": timestamp(time.time()),
                    "event": "audit-lines-dropped",
                    "dropped": count,
                    "reason": "the audit log could not keep up or could not be written",
                }
            )
            + "\n"
        )

    def stop(self) -> None:
        """Write what is left and stop the thread."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
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
        yield GaugeMetricFamily(
            "mcp_gateway_audit_healthy",
            "1 while audit lines are written, 0 while the audit log cannot keep up or be written",
            value=1.0 if self.healthy else 0.0,
        )


class OtlpAudit:
    """Audit lines as OTLP log records (event name `mcp_oauth_gateway.audit`), exported in
    batches by the OpenTelemetry SDK's own thread, as set by the `OTEL_EXPORTER_OTLP_*`
    variables."""

    def __init__(self) -> None:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource

        self.provider = LoggerProvider(
            resource=Resource.create({"service.name": "mcp-oauth-gateway"})
        )
        self.provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
        self.logger = self.provider.get_logger("mcp_oauth_gateway.audit")

    def emit(self, fields: dict[str, object]) -> None:
        """One log record: the line as its body, the fields to filter on as attributes."""
        body = {k: v for k, v in fields.items() if v is not None}
        attributes = {
            f"audit.{k}": v for k, v in body.items() if isinstance(v, str | int) and k != "time"
        }
        self.logger.emit(
            timestamp=time.time_ns(),
            body=body,  # type: ignore[arg-type]  # a map of text, numbers and maps
            attributes=attributes,
            event_name="mcp_oauth_gateway.audit",
        )

    def shutdown(self) -> None:
        """Export what is left."""
        self.provider.shutdown()
