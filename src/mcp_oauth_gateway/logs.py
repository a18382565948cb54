"""Logging set-up: records go through a queue so writing a log line never blocks the event loop.

Text lines by default; `--log-format json` writes one JSON object per line, each carrying the
`request_id` of the request it was written for (when there is one)."""

from __future__ import annotations

import atexit
import contextvars
import json
import logging
import logging.handlers
import queue
import sys
import time

import orjson

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")

# Set by the data plane for the duration of each request.
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_json = False


def json_enabled() -> bool:
    """Whether log lines are JSON objects (`configure(fmt="json")`)."""
    return _json


def json_line(fields: dict[str, object]) -> str:
    """One JSON object as a line of text (no newline), non-ASCII kept as is. orjson, about
    five times faster than json.dumps on the access log's fields; text it cannot encode (a lone
    surrogate) is written with escapes by json.dumps instead."""
    try:
        return orjson.dumps(fields).decode()
    except orjson.JSONEncodeError:
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
    """One JSON object per record: time, level, logger, message, request_id, exception."""

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
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json_line(line)


def _tag_request_id(record: logging.LogRecord) -> bool:
    # Runs in the caller's context (before the queue), where the request's id is visible.
    record.request_id = REQUEST_ID.get()
    return True


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Route all logging to stderr through a background thread, as text or JSON lines."""
    global _json
    _json = fmt == "json"
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(JsonFormatter() if _json else logging.Formatter(FORMAT))
    listener = logging.handlers.QueueListener(records, stream, respect_handler_level=False)
    listener.start()
    atexit.register(listener.stop)
    handler = logging.handlers.QueueHandler(records)
    handler.addFilter(_tag_request_id)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp and uvicorn would otherwise repeat what our own lines already say.
    logging.getLogger("uvicorn.access").disabled = True
