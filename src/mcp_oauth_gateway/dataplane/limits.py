"""Request size limits (configurable with `serve --max-header-bytes/--max-body-bytes`)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

DEFAULT_MAX_HEADER_BYTES = 16 * 1024
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


class BodyTooLarge(Exception):
    """The request body grew past the limit while it was being forwarded."""


def header_bytes(headers: list[tuple[bytes, bytes]]) -> int:
    """The size of the request's header section, as counted against the limit."""
    # map/chain keep the loop in C: this runs on every request.
    return sum(map(len, chain.from_iterable(headers))) + 4 * len(headers)
