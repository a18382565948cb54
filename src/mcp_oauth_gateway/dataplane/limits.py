"""Request size and connection limits (configurable with `serve --max-header-bytes`,
`--max-body-bytes`, `--header-timeout`, `--idle-timeout` and `--max-connections`)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

DEFAULT_MAX_HEADER_BYTES = 16 * 1024
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 30.0


@dataclass(frozen=True)
class Limits:
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Seconds a client has to send a complete request head, counted from the connection (first
    # request) or from the request's first byte (later requests on a keep-alive connection).
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    # Seconds a request body may stop arriving, and a keep-alive connection may wait between
    # requests; never applied while a response streams to a client whose request is complete.
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    # Open client connections per process; None: derived from the descriptor limit at start.
    max_connections: int | None = None


class BodyTooLarge(Exception):
    """The request body grew past the limit while it was being forwarded."""


def header_bytes(headers: list[tuple[bytes, bytes]]) -> int:
    """The size of the request's header section, as counted against the limit."""
    # map/chain keep the loop in C: this runs on every request.
    return sum(map(len, chain.from_iterable(headers))) + 4 * len(headers)
