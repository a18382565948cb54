"""Streaming reverse proxy stage: request and response bodies flow through without buffering.

MCP headers (`Mcp-Session-Id`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`,
`Last-Event-ID`) pass untouched: on the way in, only hop-by-hop headers (and what `Connection`
names), `Expect`, forwarded headers the listener does not trust and the gateway's own cookies are
dropped, and `Host` is replaced; on the way out, only hop-by-hop headers, `Date` (uvicorn writes
its own), the gateway's own cookies and, behind a CORS filter, the backend's CORS headers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from ..asgi import (
    DEFAULT_MAX_BODY_BYTES,
    BodyTooLarge,
    Headers,
    Receive,
    Scope,
    Send,
    send_error,
    send_too_large,
)
from ..controlplane.snapshot import CompiledTarget
from ..gateway_cookies import sets_gateway_cookie, without_gateway_cookies
from .upstream import (
    InvalidRequestHead,
    Upstream,
    UpstreamError,
    UpstreamResponse,
    UpstreamTlsError,
)

log = logging.getLogger("mcp_oauth_gateway.proxy")

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-connection",
    }
)
_FORWARDED = frozenset(
    {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"forwarded"}
)
# The gateway answers a client's `Expect: 100-continue` itself (uvicorn sends the interim answer
# when the body is first asked for); passed on, it only makes the backend send another.
_REQUEST_ONLY = frozenset({b"host", b"expect"})
# uvicorn writes its own `Date` on every response: the backend's would make a second one.
_RESPONSE_DROP = HOP_BY_HOP | {b"date"}
# When the route has a CORS filter, it alone decides CORS: the backend's own headers would grant
# what the filter refused (or appear twice beside the filter's), with or without an Origin.
CORS_RESPONSE = frozenset(
    {
        b"access-control-allow-origin",
        b"access-control-allow-credentials",
        b"access-control-allow-methods",
        b"access-control-allow-headers",
        b"access-control-expose-headers",
        b"access-control-max-age",
    }
)


SANDBOXED: Headers = [
    (b"content-security-policy", b"sandbox"),
    (b"x-content-type-options", b"nosniff"),
]

# Request headers the gateway itself sets on every route (the list filter's Accept-Encoding, the
# request id, tracing context, forwarded headers and Host): a client's `Connection` never drops
# them, nor a header a route's stages set (`kept`), whatever checks ran before.
GATEWAY_SET = frozenset(
    {
        b"host",
        b"accept-encoding",
        b"x-request-id",
        b"traceparent",
        b"tracestate",
        *_FORWARDED,
    }
)


def _connection_tokens(headers: Headers) -> frozenset[bytes]:
    tokens: set[bytes] = set()
    for name, value in headers:
        # The length first: this runs over every header of every request and response.
        if len(name) == 10 and name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    return frozenset(tokens)


def dropped_request_headers(trust_forwarded: bool) -> frozenset[bytes]:
    """Request headers never forwarded as they came (decided once per route)."""
    return HOP_BY_HOP | _REQUEST_ONLY | (frozenset() if trust_forwarded else _FORWARDED)


def upstream_request_headers(
    scope: Scope,
    authority: bytes,
    trust_forwarded: bool,
    drop: frozenset[bytes],
    kept: frozenset[bytes] = GATEWAY_SET,
) -> Headers:
    """Headers for the backend: hop-by-hop and Host replaced, X-Forwarded-* set; what the
    client's `Connection` names is dropped, except the headers the gateway set (`kept`)."""
    incoming: Headers = scope["headers"]
    tokens = _connection_tokens(incoming)
    if tokens:
        drop = drop | (tokens - kept)
    # One pass (this runs for every request): what is kept, the Host, and any
    # X-Forwarded-For to extend.
    out: Headers = []
    host = b""
    previous = None
    for name, value in incoming:
        if name == b"host":
            if not host:
                host = value
        elif name == b"x-forwarded-for" and name not in drop:
            if previous is None:
                previous = value
        elif name == b"cookie":
            cookies = without_gateway_cookies(value)
            if cookies is not None and name not in drop:
                out.append((name, cookies))
        elif name not in drop:
            out.append((name, value))
    client = scope.get("client")
    client_ip = client[0].encode() if client else b"unknown"
    out.append((b"x-forwarded-for", previous + b", " + client_ip if previous else client_ip))
    if not trust_forwarded:
        out.append((b"x-forwarded-proto", scope.get("scheme", "http").encode()))
        if host:
            out.append((b"x-forwarded-host", host))
    out.append((b"host", authority))
    return out


def response_drops(cors_filtered: bool) -> tuple[frozenset[bytes], frozenset[bytes]]:
    """Response headers never passed on: (for most statuses, for 204 and 304), decided once
    per route. 204 and 304 have no body: a length passed on would make uvicorn wait for one."""
    drop = _RESPONSE_DROP | (CORS_RESPONSE if cors_filtered else frozenset())
    return drop, drop | {b"content-length"}


_DEFAULT_DROPS = response_drops(cors_filtered=False)


def downstream_response_headers(
    headers: Headers,
    status: int = 200,
    drops: tuple[frozenset[bytes], frozenset[bytes]] = _DEFAULT_DROPS,
) -> Headers:
    """Response headers for the client: hop-by-hop and those the gateway sets itself removed."""
    drop = drops[1] if status == 204 or status == 304 else drops[0]
    tokens = _connection_tokens(headers)
    if tokens:
        drop = drop | tokens
    out: Headers = []
    for name, value in headers:
        lowered = name.lower()
        if lowered in drop or (lowered == b"set-cookie" and sets_gateway_cookie(value)):
            continue
        out.append((lowered, value))
    # Tenants' routes share a host and so an origin with each other and the Broker's pages: a
    # document a backend serves runs sandboxed (an opaque origin, no script), so it can neither
    # read nor drive another route's consent page. MCP answers are read by fetch, which this
    # header does not affect.
    out.extend(SANDBOXED)
    return out


def _value(headers: Headers, name: bytes) -> bytes | None:
    """The first value of a (lowercase) header, or None."""
    for key, value in headers:
        if key == name:
            return value
    return None


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _cancel_when_gone(
    receive: Receive, relaying: asyncio.Task[None], gone: list[bool]
) -> None:
    """Once the client disconnects (or its receive fails), cancel the task relaying to it."""
    try:
        await _wait_for_disconnect(receive)
    except asyncio.CancelledError:
        raise
    except Exception:
        pass  # as a disconnect: nothing reads from the client any more (as before: any end)
    gone.append(True)
    relaying.cancel()


class ReverseProxy:
    """The last stage: forwards to the GatewayBackend target."""

    def __init__(
        self,
        target: CompiledTarget,
        upstream: Upstream,
        timeout: float,
        trust_forwarded: bool,
        max_body: int = DEFAULT_MAX_BODY_BYTES,
        latency: Callable[[float], None] | None = None,
        cors_filtered: bool = False,
        kept: frozenset[bytes] = GATEWAY_SET,
    ):
        self.base = target.url
        self.tls = target.tls
        self.authority = target.authority.encode()
        self.upstream = upstream
        self.timeout = timeout
        self.trust_forwarded = trust_forwarded
        self.drop = dropped_request_headers(trust_forwarded)
        self.max_body = max_body
        self.latency = latency
        self.response_drops = response_drops(cors_filtered)
        self.kept = kept

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"")
        url = self.base + ("?" + query.decode("latin-1") if query else "")
        headers = upstream_request_headers(
            scope, self.authority, self.trust_forwarded, self.drop, self.kept
        )
        declared = _value(headers, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await send_too_large(send, BodyTooLarge(self.max_body))
            return
        first = await receive()
        if first["type"] == "http.disconnect":
            return
        body: bytes | AsyncIterator[bytes]
        if first.get("more_body", False):
            body = self._stream_body(first.get("body", b""), receive, self.max_body)
        else:
            whole: bytes = first.get("body", b"")
            if len(whole) > self.max_body:
                await send_too_large(send, BodyTooLarge(self.max_body))
                return
            body = whole
        response = await self._forward(scope["method"], url, headers, body, send)
        if response is not None:
            try:
                await self._answer(response, receive, send)
            finally:
                response.release()

    async def _forward(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes],
        send: Send,
    ) -> UpstreamResponse | None:
        """The backend's response, or None once a 502/504/413 has been answered instead."""
        started = time.perf_counter()
        try:
            response = await self.upstream.request(
                method, url, headers, body, self.timeout, tls=self.tls
            )
        except TimeoutError:
            backend = self.authority.decode()
            await send_error(
                send,
                504,
                "gateway_timeout",
                f"the MCP backend {backend} did not answer within {self.timeout:g}s",
            )
            return None
        except BodyTooLarge as exc:
            await send_too_large(send, exc)
            return None
        except InvalidRequestHead as exc:
            # A value some stage computed (an exchanged token, a claim) would break the request
            # into lines the backend reads as headers of their own.
            log.warning("request to backend %s not sent: %s", self.authority.decode(), exc)
            description = f"the request for the MCP backend was not sent: {exc}"
            await send_error(send, 502, "bad_gateway", description)
            return None
        except UpstreamError as exc:
            log.warning("backend %s unreachable: %s", self.authority.decode(), exc)
            description = f"the MCP backend {self.authority.decode()} is unreachable"
            if isinstance(exc, UpstreamTlsError):  # the operator's to fix; the caller may tell
                description += f": {exc}"
            await send_error(send, 502, "bad_gateway", description)
            return None
        if self.latency is not None:
            self.latency(time.perf_counter() - started)
        return response

    async def _answer(self, response: UpstreamResponse, receive: Receive, send: Send) -> None:
        """Relay the backend's response: its head, then its body or its event stream."""
        headers = downstream_response_headers(
            response.headers, response.status, self.response_drops
        )
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        content_type = _value(headers, b"content-type")
        if content_type is not None and content_type.startswith(b"text/event-stream"):
            await self._relay_until_disconnect(response, receive, send)
        else:
            await self._relay(response, send)

    @staticmethod
    async def _stream_body(first: bytes, receive: Receive, limit: int) -> AsyncIterator[bytes]:
        # Streamed on as it arrives (`asgi.read_body` would hold it whole), counted against the
        # same limit and answered with the same 413.
        size = len(first)
        if size > limit:
            raise BodyTooLarge(limit)
        if first:
            yield first
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(limit)
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return

    @staticmethod
    async def _relay(response: UpstreamResponse, send: Send) -> None:
        complete = response.complete_body()
        if complete is not None:
            # Common case (a JSON answer already read whole): one message, no iterator.
            await send({"type": "http.response.body", "body": complete, "more_body": False})
            return
        try:
            async for chunk in response.chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamError as exc:
            log.warning("%s", exc)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _relay_until_disconnect(
        self, response: UpstreamResponse, receive: Receive, send: Send
    ) -> None:
        # A stream may run for hours: when the client goes away, stop reading the backend. The
        # relay runs in the request's own task and a watcher cancels it on disconnect: one task
        # per open stream fewer than relaying in a task of its own (and no asyncio.wait), each
        # stream's objects being what the collector walks when many streams open at once.
        task = asyncio.current_task()
        assert task is not None  # an ASGI app always runs in a task
        gone: list[bool] = []
        watcher = asyncio.ensure_future(_cancel_when_gone(receive, task, gone))
        try:
            await self._relay(response, send)
        except asyncio.CancelledError:
            # The watcher's cancellation is the client leaving, not the request's: it ends
            # the relay only. Any other (a shutdown's) goes on up.
            if not gone or task.uncancel() > 0:
                raise
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
