"""A response head for the client, built in one pass over the headers an ASGI app sends, and the
framing of the body that follows it.

These are the rules that keep the bytes a client reads one response after another:
- no header name or value can end a line or the head early: CR and LF inside a name or value
  are refused (counted over the whole head: each line adds one of each), so are NUL and the
  other control bytes but tab, and a name must be an RFC 9110 token;
- the body's framing is one the client agrees with: a Content-Length of digits only, given
  once and never beside Transfer-Encoding; `Transfer-Encoding: chunked` added by the server
  when the length is unknown (any other coding from the app is refused), and for an HTTP/1.0
  client, which does not know chunked, the body ends with the connection instead;
- HEAD, 204 and 304 answers carry no body on the wire whatever the app sends after them, and a
  1xx status is refused as a final answer (the client would wait for another head);
- `Connection: close` whenever the connection ends after this response.
A head that breaks one raises InvalidResponseHead: nothing of it is written."""

from __future__ import annotations

import http
import re
from collections.abc import Iterable

# What a response's body is, on the wire, after its head.
SIZED, CHUNKED, UNTIL_CLOSE, NO_BODY = 0, 1, 2, 3

TOKEN_CHARS = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# Control bytes but tab, CR and LF (those two are counted instead: see _check_lines).
_CONTROL = re.compile(b"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A Content-Length longer than this is not a length any client reads as one number.
MAX_LENGTH_DIGITS = 18
_FRAMING_NAME_SIZES = frozenset({len(b"content-length"), len(b"transfer-encoding"), 10})
_BODYLESS_STATUS = frozenset({204, 304})
# Names seen valid (bounded; all forgotten when full): a response's names come from a small set.
_KNOWN_NAMES: set[bytes] = set()
MAX_KNOWN_NAMES = 4096

CLOSE_LINE = b"connection: close\r\n"
CHUNKED_LINE = b"transfer-encoding: chunked\r\n"


class InvalidResponseHead(RuntimeError):
    """The app's response head breaks a rule of this module; nothing was written."""


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


# Final statuses only: a 1xx answer is never the end of an exchange.
STATUS_LINES = {status: _status_line(status) for status in range(200, 600)}


def valid_name(name: bytes) -> bool:
    """Whether `name` is a header name (an RFC 9110 token)."""
    return bool(name) and not name.translate(None, TOKEN_CHARS)


def content_length(value: bytes) -> int:
    """The length a Content-Length value announces: digits only, optional spaces or tabs around
    them (int() alone would take `+5`, `1_0` or non-ASCII digits, which a client reads
    differently); InvalidResponseHead otherwise."""
    digits = value if value.isdigit() else value.strip(b" \t")
    if not digits.isdigit() or len(digits) > MAX_LENGTH_DIGITS:
        raise InvalidResponseHead(f"invalid Content-Length {value[:40]!r}")
    return int(digits)


def connection_closes(value: bytes) -> bool:
    """Whether a Connection value names `close`."""
    return b"close" in [token.strip(b" \t").lower() for token in value.split(b",")]


def _check_name(name: bytes) -> None:
    if name not in _KNOWN_NAMES:
        if type(name) is not bytes or not valid_name(name):
            raise InvalidResponseHead(f"invalid header name {name[:40]!r}")
        if len(_KNOWN_NAMES) >= MAX_KNOWN_NAMES:
            _KNOWN_NAMES.clear()
        _KNOWN_NAMES.add(name)


def _check_lines(block: bytes, lines: int) -> None:
    # Each line adds exactly one CR and one LF: any more came from inside a name or a value.
    if block.count(b"\n") != lines or block.count(b"\r") != lines or _CONTROL.search(block):
        raise InvalidResponseHead("a header name or value holds a control character")


def default_block(defaults: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The server's own header lines (uvicorn's `date`), checked like the app's."""
    lines = [b"%s: %s\r\n" % (name, value) for name, value in defaults]
    for name, _ in defaults:
        _check_name(name)
    block = b"".join(lines)
    _check_lines(block, len(lines))
    return block


# The server's own lines, for the last list of them (uvicorn makes a new one each second).
_default_source: object = None
_default_lines = b""


def default_lines(defaults: list[tuple[bytes, bytes]]) -> bytes:
    """default_block, computed once per list of the server's own headers."""
    global _default_source, _default_lines
    if defaults is not _default_source:
        _default_lines = default_block(defaults)
        _default_source = defaults
    return _default_lines


def response_head(
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    defaults: bytes,
    bodyless_request: bool,
    http11: bool,
    keep_alive: bool,
) -> tuple[bytes, int, int, bool]:
    """The head to write and the body's framing: (head, SIZED/CHUNKED/UNTIL_CLOSE/NO_BODY, the
    announced length (SIZED), whether the connection stays open after the response).

    `defaults` are the server's own lines (default_block), `bodyless_request` a HEAD request,
    `keep_alive` what the request and the server allow."""
    status_line = STATUS_LINES.get(status)
    if status_line is None:
        raise InvalidResponseHead(f"{status!r} is not a final HTTP status")
    lines = [status_line, defaults]
    length = -1
    chunked = closes = False
    for name, value in headers:
        if name not in _KNOWN_NAMES:
            _check_name(name)
        if len(name) in _FRAMING_NAME_SIZES:
            lowered = name.lower()
            if lowered == b"content-length":
                if length >= 0:
                    raise InvalidResponseHead("Content-Length given twice")
                # Plain digits, the common case, without a call.
                fast = value.isdigit() and len(value) <= MAX_LENGTH_DIGITS
                length = int(value) if fast else content_length(value)
            elif lowered == b"transfer-encoding":
                if value.strip(b" \t").lower() != b"chunked" or chunked:
                    raise InvalidResponseHead(f"Transfer-Encoding {value[:40]!r} not supported")
                chunked = True
                continue  # the server writes its own, when it chunks
            elif lowered == b"connection" and connection_closes(value):
                closes = True
        lines.append(b"%s: %s\r\n" % (name, value))
    if chunked and length >= 0:
        raise InvalidResponseHead("both Content-Length and Transfer-Encoding given")
    if bodyless_request or status in _BODYLESS_STATUS:
        mode = NO_BODY
    elif length >= 0:
        mode = SIZED
    elif http11:
        mode = CHUNKED
        lines.append(CHUNKED_LINE)
    else:
        # An HTTP/1.0 client reads a body of unknown length until the connection closes.
        mode = UNTIL_CLOSE
        keep_alive = False
    if closes:
        keep_alive = False
    elif not keep_alive:
        lines.append(CLOSE_LINE)
    lines.append(b"\r\n")
    head = b"".join(lines)
    _check_lines(head, len(lines) + defaults.count(b"\n") - 1)
    return head, mode, length, keep_alive


def chunk(body: bytes, last: bool) -> bytes:
    """`body` as one chunk of a chunked body (none when empty), then the last chunk if `last`."""
    if body:
        framed = b"%x\r\n%s\r\n" % (len(body), body)
        return framed + b"0\r\n\r\n" if last else framed
    return b"0\r\n\r\n" if last else b""
