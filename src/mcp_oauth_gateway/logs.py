"""Logging set-up: records go through a queue so writing a log line never blocks the event loop.

Text lines by default; `--log-format json` writes one JSON object per line, each carrying the
`request_id` of the request it was written for (when there is one).

A value a request carried (a path, a `sub`, an error's text) cannot start a log line of its own,
in either format: text messages are escaped (`escape`) and JSON lines are printable ASCII or
printable Unicode only. A traceback keeps its lines, each indented, so a line that starts at
the left margin is always the start of a record."""

from __future__ import annotations

import atexit
import contextvars
import copy
import json
import logging
import logging.handlers
import queue
import sys
import time
from typing import TextIO

import orjson

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")

# Set by the data plane for the duration of each request.
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_json = False


def json_enabled() -> bool:
    """Whether log lines are JSON objects (`configure(fmt="json")`)."""
    return _json


_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape(text: str) -> str:
    """`text` with every character that is not printable written as a visible escape (`\\n`,
    `\\x85`, `\\u2028`) and the backslash doubled, so it cannot start a new line."""
    # str.isprintable() is False for C0, DEL, C1, the line and paragraph separators and every
    # other Unicode separator, format or unassigned character: one C-speed pass for the usual
    # value, which needs nothing. The backslash is escaped too, so an escape read in a log line
    # was written by the gateway, never typed by a client.
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else _escaped(c) for c in text)


def escape_field(text: str) -> str:
    """`escape(text)` with the space escaped too (`\\x20`): one field of a space-separated line."""
    if text.isprintable() and " " not in text and "\\" not in text:
        return text
    return escape(text).replace(" ", "\\x20")


def json_line(fields: dict[str, object]) -> str:
    """One JSON object as a line of text (no newline), printable non-ASCII kept as is. orjson,
    about five times faster than json.dumps on the access log's fields; a line it cannot encode
    (a lone surrogate) or that would hold a character some readers take for a line break
    (U+0085, U+2028, ...) is written by json.dumps, which escapes everything but ASCII."""
    try:
        line = orjson.dumps(fields).decode()
    except orjson.JSONEncodeError:
        return json.dumps(fields, default=str)
    # orjson escapes only C0, `"` and `\\`: DEL, C1 and the Unicode separators pass as they are.
    # An ASCII line (a flag, no scan) can hold only DEL of them; isprintable() reads the rest.
    if (line.isascii() and "\x7f" not in line) or line.isprintable():
        return line
    return json.dumps(fields, default=str)


def iso_second(second: int) -> str:
    """RFC 3339 UTC date and time to the second: `timestamp` without its milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def timestamp(seconds: float, to_the_second: str | None = None) -> str:
    """RFC 3339 UTC time with milliseconds, as written in JSON lines. `to_the_second` is
    `iso_second(int(seconds))` when the caller keeps it (the access log, once a second)."""
    whole = int(seconds)
    prefix = iso_second(whole) if to_the_second is None else to_the_second
    return f"{prefix}.{int((seconds - whole) * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, request_id, exception, stack."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as a single JSON line."""
        line: dict[str, object] = {
            "time": timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            line["request_id"] = request_id
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json_line(line)


class TextFormatter(logging.Formatter):
    """`FORMAT`, with the message escaped (no logged value starts a line of its own) and a
    traceback's lines escaped and indented (none of them starts at the left margin)."""

    def __init__(self) -> None:
        super().__init__(FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        """Render `record`: one line, then its traceback and stack (if any) indented."""
        record.message = escape(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for text in (record.exc_text, record.stack_info):
            if text:
                line += "\n" + _indented(text)
        return line


def _indented(text: str) -> str:
    return "\n".join("    " + escape(line) for line in text.split("\n"))


class _QueueHandler(logging.handlers.QueueHandler):
    """Hands records to the writer thread with their message and traceback kept apart (the
    base class folds the traceback into the message, where the text format would escape it
    onto one line)."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        """A copy of `record` with its arguments merged and its traceback rendered as text."""
        record = copy.copy(record)
        record.msg = record.message = record.getMessage()
        record.args = None
        if record.exc_info:
            # Rendered here, while the exception's frames are still alive; as plain text
            # (unescaped), for the writer thread's formatter to escape or quote.
            record.exc_text = record.exc_text or _PLAIN.formatException(record.exc_info)
            record.exc_info = None
        return record


_PLAIN = logging.Formatter()


def _tag_request_id(record: logging.LogRecord) -> bool:
    # Runs in the caller's context (before the queue), where the request's id is visible.
    record.request_id = REQUEST_ID.get()
    return True


def queued(
    stream: TextIO, json_lines: bool
) -> tuple[logging.Handler, logging.handlers.QueueListener]:
    """A handler that queues records, and the started listener that writes them to `stream`."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    writer = logging.StreamHandler(stream)
    writer.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    listener = logging.handlers.QueueListener(records, writer, respect_handler_level=False)
    listener.start()
    handler = _QueueHandler(records)
    handler.addFilter(_tag_request_id)
    return handler, listener


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Route all logging to stderr through a background thread, as text or JSON lines."""
    global _json
    _json = fmt == "json"
    handler, listener = queued(sys.stderr, _json)
    atexit.register(listener.stop)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp and uvicorn would otherwise repeat what our own lines already say.
    logging.getLogger("uvicorn.access").disabled = True
