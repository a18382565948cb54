"""The values of MCP's routing headers (2026-07-28): an `Mcp-Name` (a tool's name, a resource's
URI) that is not plain printable ASCII travels wrapped as `=?base64?<UTF-8 in base64>?=`, so a
reader compares the unwrapped value with the body's, and a writer wraps what needs it."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable

_SENTINEL = re.compile(r"=\?base64\?(?P<payload>.*)\?=")
_PLAIN = re.compile(r"[\x20-\x7e]*")


def decode_name(value: str | None) -> str | None:
    """A header value as the client meant it: verbatim, or the UTF-8 inside the base64
    wrapping (None when that wrapping is broken or not canonical, so it matches nothing)."""
    if value is None:
        return None
    match = _SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def encode_name(value: str) -> bytes:
    """`value` as a header carries it: verbatim when it is printable ASCII without edge spaces
    (and does not itself look wrapped), else wrapped in base64, as clients write it."""
    if _PLAIN.fullmatch(value) and value == value.strip() and not _SENTINEL.fullmatch(value):
        return value.encode("ascii")
    return b"=?base64?" + base64.b64encode(value.encode("utf-8")) + b"?="


# The revisions spoken without a session; the older ones open one with `initialize`.
STATELESS_VERSIONS = ("2026-07-28",)
SESSION_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})


def is_stateless(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a request speaks the stateless wire: a version header that is not of the
    session era, and no session."""
    version = session = None
    for name, value in headers:
        if name == b"mcp-protocol-version" and version is None:
            version = value.decode("latin-1")
        elif name == b"mcp-session-id":
            session = value
    return version is not None and version not in SESSION_VERSIONS and session is None
