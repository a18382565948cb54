"""The access log: one line per request, buffered in memory and written by a background thread
in batches, so the request path only formats a string and appends it to a list."""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import time
from typing import Any

from ..logs import escape_field, iso_second, json_line, timestamp

FLUSH_INTERVAL = 0.2
MAX_PENDING = 100_000  # beyond this, lines are dropped (and counted) rather than hoarded
FIELD_MEMO = 4096  # escaped request and caller fields remembered (all forgotten when full)
PIPE_BUF = 4096  # the longest write a pipe keeps whole (Linux)
_MILLISECONDS = tuple(f"{ms:03d}" for ms in range(1000))

log = logging.getLogger("mcp_oauth_gateway.access")


class AccessLog:
    """`record()` is cheap and never blocks; a daemon thread writes batches to stderr."""

    def __init__(self, fd: int | None = None, json_lines: bool = False):
        self.enabled = log.isEnabledFor(logging.INFO)
        self.json_lines = json_lines
        self._fd = sys.stderr.fileno() if fd is None else fd
        self._pending: list[str] = []
        # Whether the output is a regular file (a batch in one write), found at the first.
        self._whole_writes: bool | None = None
        self._dropped = 0
        self._second = -1
        self._stamp = ""
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        # The escaped " INFO …: method path status " and "sub=… iss=…" parts, by their values.
        self._requests: dict[tuple[str, str, int], str] = {}
        self._callers: dict[tuple[object, object], str] = {}

    def start(self) -> None:
        """Start the writer thread (idempotent)."""
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="access-log", daemon=True)
            self._thread.start()

    def record(
        self,
        method: str,
        path: str,
        status: int,
        seconds: float,
        sub: object,
        request_id: str | None = None,
        iss: object = None,
    ) -> None:
        """Queue one access line; `sub` and `iss` are the verified token's (None without one)."""
        if not self.enabled:
            return
        now = time.time()
        second = int(now)
        if second != self._second:
            # The date and time to the second, formatted once a second rather than per line.
            self._second = second
            if self.json_lines:
                self._stamp = iso_second(second)
            else:
                self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        if len(self._pending) >= MAX_PENDING:
            self._dropped += 1
            return
        line = self._line(now, method, path, status, seconds, sub, iss, request_id)
        # Longer than a pipe writes whole (a long path a request chose, escaped): it would cut
        # another writer's line on a shared pipe (`--audit-log -` beside `2>&1`).
        if len(line) >= PIPE_BUF // 4 and len(line.encode("utf-8", "replace")) >= PIPE_BUF:
            line = self._line(
                now, method, _short(path), status, seconds, _short(sub), _short(iss), request_id
            )
        self._pending.append(line)

    def _line(
        self,
        now: float,
        method: str,
        path: str,
        status: int,
        seconds: float,
        sub: object,
        iss: object,
        request_id: str | None,
    ) -> str:
        """One access line, newline included, in the configured format."""
        if not self.json_lines:
            return self._text_line(now, method, path, status, seconds, sub, iss)
        fields: dict[str, object] = {
            "time": timestamp(now, self._stamp),
            "level": "INFO",
            "logger": log.name,
            "message": "request",
            "request_id": request_id,
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "sub": None if sub is None else str(sub),
            "iss": None if iss is None else str(iss),
        }
        return json_line(fields) + "\n"

    def _text_line(
        self,
        now: float,
        method: str,
        path: str,
        status: int,
        seconds: float,
        sub: object,
        iss: object,
    ) -> str:
        """A text access line. Every value a request carried is escaped, spaces included: one
        field each, one line; `sub` is unique only within its issuer, so both name the caller."""
        # Everything between the time and the duration, by its values: escaping and formatting
        # it per line cost as much as the rest of the line (method, path and status repeat).
        middle = self._requests.get((method, path, status))
        if middle is None:
            middle = (
                f" INFO mcp_oauth_gateway.access: {escape_field(method)} {escape_field(path)} "
                f"{status} "
            )
            _remember(self._requests, (method, path, status), middle)
        # Only text claims are remembered: 1 and True are one key to a dict.
        known = (sub is None or type(sub) is str) and (iss is None or type(iss) is str)
        caller = self._callers.get((sub, iss)) if known else None
        if caller is None:
            caller = _caller(sub, iss)
            if known:
                _remember(self._callers, (sub, iss), caller)
        return (
            f"{self._stamp},{_MILLISECONDS[int((now - int(now)) * 1000)]}{middle}"
            f"{seconds * 1000:.1f}ms {caller}\n"
        )

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(FLUSH_INTERVAL)
            self.flush()

    def flush(self) -> None:
        """Write what is pending (called by the thread, and at shutdown)."""
        batch, self._pending = self._pending, []
        if self._dropped:
            message = f"{self._dropped} lines dropped (the log output could not keep up)"
            batch.append(
                json_line(
                    {
                        "time": timestamp(time.time()),
                        "level": "WARNING",
                        "logger": log.name,
                        "message": message,
                    }
                )
                + "\n"
                if self.json_lines
                else f"WARNING {log.name}: {message}\n"
            )
            self._dropped = 0
        if not batch:
            return
        try:
            for data in self._writes(batch):
                while data:
                    data = data[os.write(self._fd, data) :]
        except OSError:
            pass

    def _writes(self, batch: list[str]) -> list[bytes]:
        """The batch in one write to a file; to a pipe or socket (standard error shared with
        standard output, where `--audit-log -` writes too), whole lines of at most PIPE_BUF
        bytes per write, which are never interleaved with another writer's."""
        if self._whole_writes is None:
            try:
                self._whole_writes = stat.S_ISREG(os.fstat(self._fd).st_mode)
            except OSError:
                self._whole_writes = False
        if self._whole_writes:
            return ["".join(batch).encode("utf-8", "replace")]
        writes: list[bytes] = []
        chunk: list[bytes] = []
        size = 0
        for line in batch:
            data = line.encode("utf-8", "replace")
            if chunk and size + len(data) > PIPE_BUF:
                writes.append(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(data)
            size += len(data)
        if chunk:
            writes.append(b"".join(chunk))
        return writes

    def stop(self) -> None:
        """Flush and stop the thread."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(2)
            self._thread = None
        self.flush()


def _short(value: Any) -> Any:
    """A value a request chose, cut to 64 characters (ending in "…") for a line that would
    outgrow PIPE_BUF; None stays None."""
    if value is None:
        return None
    text = str(value)
    return text if len(text) <= 64 else text[:63] + "…"


def _caller(sub: object, iss: object) -> str:
    """`sub=… iss=…` of a text access line, each escaped (`sub=-` without a token)."""
    who = f"sub={escape_field(str(sub))}" if sub else "sub=-"
    return who if iss is None else f"{who} iss={escape_field(str(iss))}"


def _remember(memo: dict[Any, str], key: tuple[Any, ...], shown: str) -> None:
    # Methods, paths, subjects and issuers repeat: escaping each character every time would
    # cost more than a lookup. Forgotten all at once when full.
    if len(memo) >= FIELD_MEMO:
        memo.clear()
    memo[key] = shown
