"""The head of a request to a backend: written once, checked whole for control characters.

Connections to a backend are shared by requests of different callers, so nothing a stage
computed may add a line (a header, a second request) to what the backend reads.
"""

from __future__ import annotations

from ..asgi import Headers
from .upstream import InvalidRequestHead

# `expect` too: the gateway has read the whole body already, so asking the backend for a
# `100 Continue` only adds an interim response to the exchange.
_SKIP = frozenset(
    {b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"expect"}
)


# Control characters no header or request line may hold (HTAB aside): CR, LF and NUL first.
_CONTROLS = bytes([*range(0x09), *range(0x0A, 0x20), 0x7F])


def request_head(method: str, target: bytes, headers: Headers, length: int | None) -> bytes:
    """The request line and headers, framed for `length` bytes of body (None: chunked);
    InvalidRequestHead when something in them would end a line."""
    lines = [method.encode(), b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        if name not in _SKIP:
            lines += [name, b": ", value, b"\r\n"]
    written = (len(lines) - 4) // 4
    if length is None:
        lines.append(b"transfer-encoding: chunked\r\n\r\n")
    else:
        lines += [b"content-length: ", str(length).encode(), b"\r\n\r\n"]
    head = b"".join(lines)
    # The only control characters in the head are the CRLFs written here (RFC 9110 field values
    # hold none): a value a stage computed (an exchanged token, a claim) cannot add a line on a
    # connection other requests share. One pass in C.
    if len(head) - len(head.translate(None, _CONTROLS)) != 2 * (written + 3):
        raise InvalidRequestHead(_culprit(method, target, headers))
    return head


def _culprit(method: str, target: bytes, headers: Headers) -> str:
    """What makes a request head unsafe to write, for the error (never the value itself)."""
    for name, value in headers:
        if name not in _SKIP:
            if name.translate(None, _CONTROLS) != name:
                return f"the header name {name[:60]!r} holds a control character"
            if value.translate(None, _CONTROLS) != value:
                return f"the value of header {name.decode('latin-1')} holds a control character"
    return f"the request line {method[:20]!r} {target[:100]!r} holds a control character"
