"""Logging set-up: records go through a queue so writing a log line never blocks the event loop."""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(level: str = "INFO") -> None:
    """Route all logging to stderr through a background thread."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter(FORMAT))
    listener = logging.handlers.QueueListener(records, stream, respect_handler_level=False)
    listener.start()
    atexit.register(listener.stop)
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(records)]
    root.setLevel(level.upper())
    # aiohttp and uvicorn would otherwise repeat what our own lines already say.
    logging.getLogger("uvicorn.access").disabled = True
