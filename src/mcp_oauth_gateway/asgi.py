"""The HTTP vocabulary every layer shares: ASGI types, JSON and error responses, reading a body
(the one reader, and the one 413 answer), the request's public origin, request size limits.

A leaf: it imports nothing of ours, so the stages, the proxy and the Broker can all speak it
without depending on each other (the way `starlette.types` is a leaf).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

# Scope keys the pipeline stages hand to each other.
CLAIMS_KEY = "mcp_oauth_gateway.jwt"
TOKEN_KEY = "mcp_oauth_gateway.token"
# Set when the token presented holds another (a Broker's DPoP-bound token holds the provider's):
# the one inside, which is what the backend may be given. TOKEN_KEY stays the one presented,
# which names the claims (they say it is bound) in every memo keyed by it.
PROVIDER_TOKEN_KEY = "mcp_oauth_gateway.provider_token"
# Set when the token came with the DPoP scheme (RFC 9449): the algorithms the route's DPoP
# challenge offers, so that a later refusal puts its error on that challenge.
DPOP_KEY = "mcp_oauth_gateway.dpop"
# Set by the entry point for every request: whether forwarded headers are trusted, and (once
# asked for) the gateway's public origin as this request's client sees it.
TRUST_FORWARDED_KEY = "mcp_oauth_gateway.trust_forwarded"
ORIGIN_KEY = "mcp_oauth_gateway.origin"
# Set by the entry point when the audit trail is on (`serve --audit-log`): the request's audit
# record (`audit.AuditRecord`), which the stages fill in at their decision points.
AUDIT_KEY = "mcp_oauth_gateway.audit"

JSON = b"application/json"

DEFAULT_MAX_HEADER_BYTES = 16 * 1024
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 30.0
# Verified tokens (and authorization decisions) a process remembers over all its routes: a shared
# gateway's tens of thousands of users, at about 2 KB an entry (docs/performance.md).
DEFAULT_TOKEN_CACHE_ENTRIES = 100_000


# --- headers --------------------------------------------------------------------------------


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (`name` in lowercase), or None."""
    headers: Headers = scope["headers"]
    for key, value in headers:
        if key == name:
            return value
    return None


# Control characters the HTTP server refuses to write in a header value (it would answer 500).
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")


def quoted_string(value: str) -> str:
    """`value` as the inside of an RFC 9110 quoted-string (a challenge parameter)."""
    # Header values are one line of visible characters: a reason quoting a claim or a tool name
    # must neither start another line nor hold a character the server refuses to send.
    flat = _CONTROL.sub(" ", value)
    return flat.replace("\\", "\\\\").replace('"', '\\"')


def first_item(value: bytes) -> bytes:
    """The first element of a comma-separated header value, trimmed."""
    return value.split(b",", 1)[0].strip()


def request_origin(scope: Scope) -> str:
    """`scheme://host[:port]` of the gateway as the client sees it, computed once per request
    (forwarded headers count only when the entry point marked them trusted)."""
    origin: str | None = scope.get(ORIGIN_KEY)
    if origin is None:
        origin = scope[ORIGIN_KEY] = _origin(scope, bool(scope.get(TRUST_FORWARDED_KEY)))
    return origin


def _origin(scope: Scope, trust_forwarded: bool) -> str:
    scheme = scope.get("scheme", "http")
    host_value = header(scope, b"host")
    if trust_forwarded:
        proto = header(scope, b"x-forwarded-proto")
        if proto and first_item(proto).lower() in (b"http", b"https"):
            scheme = first_item(proto).lower().decode("latin-1")
        forwarded_host = header(scope, b"x-forwarded-host")
        if forwarded_host and first_item(forwarded_host):
            host_value = forwarded_host
    if host_value:
        host = first_item(host_value).decode("latin-1")
    else:
        server_host, server_port = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server_host}:{server_port}"
    return f"{scheme}://{host}"


# --- bodies and limits ----------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Request size, connection and memo limits (`serve --max-header-bytes`, `--max-body-bytes`,
    `--header-timeout`, `--idle-timeout`, `--max-connections`, `--token-cache-entries`)."""

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
    # Entries of each route's verified-token cache and authorization memo (least recently used
    # forgotten first).
    token_cache_entries: int = DEFAULT_TOKEN_CACHE_ENTRIES


# What sets the limit of a request body that goes on to a backend (and its default).
MAX_BODY_SETTING = "set by serve --max-body-bytes"
# The one error code of every 413 the gateway answers.
TOO_LARGE = "request_too_large"


class BodyTooLarge(Exception):
    """A request body past its limit (`limit` bytes, `setting` says what sets it); answered by
    `send_too_large`, the same everywhere."""

    def __init__(self, limit: int, setting: str = MAX_BODY_SETTING):
        super().__init__(f"the request body exceeds {limit} bytes, the limit {setting}")
        self.limit = limit


def header_bytes(headers: Headers) -> int:
    """The size of the request's header section, as counted against the limit."""
    # map/chain keep the loop in C: this runs on every request.
    return sum(map(len, chain.from_iterable(headers))) + 4 * len(headers)


async def read_body(receive: Receive, limit: int, setting: str = MAX_BODY_SETTING) -> bytes | None:
    """The whole request body, or None when the client left first; BodyTooLarge once it grows
    past `limit` bytes (nothing more is read)."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None  # the client went away
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit, setting)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body read first, then the client's own messages (a streamed
    answer keeps listening for the client's disconnect, which must be the real one)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


# --- responses ------------------------------------------------------------------------------


async def send_json(
    send: Send, status: int, payload: object, headers: Headers | None = None
) -> None:
    """Send a complete JSON response."""
    body = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", JSON),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send: Send, status: int, error: str, description: str, headers: Headers | None = None
) -> None:
    """Send `{"error": …, "error_description": …}` with `status`."""
    await send_json(send, status, {"error": error, "error_description": description}, headers)


async def send_too_large(send: Send, exc: BodyTooLarge) -> None:
    """The 413 of a request body past its limit, naming the limit and what sets it."""
    await send_error(send, 413, TOO_LARGE, str(exc))
