"""Connection limits for the HTTP server: a header-read timeout, an idle timeout for request
bodies and between requests, and a cap on open connections.

uvicorn's httptools protocol arms its keep-alive timer only after a first response and never
bounds how long a request head or body may take, so a client that connects and then trickles
bytes (or sends nothing) holds a descriptor for as long as it likes. The protocol below adds
those bounds without a timer per chunk: a head gets one timer, and a body that spans several
reads gets one timer that re-arms itself from the time of the last read."""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import time
from collections.abc import Iterable
from typing import Any

import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from .asgi import Limits
from .coalescing import CoalescingTransport
from .dataplane.metrics import ConnectionCounts

log = logging.getLogger("mcp_oauth_gateway")

FD_LIMIT_BOUND = 1 << 16
FD_RESERVE = 256
MAX_TIMEOUT = 86_400.0
# Under a flood every refusal would otherwise log a line: one warning per interval is enough.
REFUSAL_LOG_INTERVAL = 60.0
HEAD_LINE_ROOM = 16 * 1024

# Once draining, how long a connection must have been idle before it is closed. A client may
# write its next request on an idle connection at the very moment the server closes it, and that
# request is lost; a client's pool no longer reuses a connection idle this long (httpx: 5 s,
# undici, Node's fetch: 4 s), so closing it then loses nothing. A request that comes sooner is
# answered, with `Connection: close`.
DRAIN_IDLE_CLOSE = 6.0

# Where the request parser is in the byte stream; decides which timer applies.
_BETWEEN, _HEAD, _BODY = 0, 1, 2


def fd_limit_target(soft: int, hard: int, bound: int = FD_LIMIT_BOUND) -> int:
    """The soft descriptor limit to ask for: the hard limit up to `bound`, never below `soft`."""
    if soft == resource.RLIM_INFINITY:
        return soft
    ceiling = bound if hard == resource.RLIM_INFINITY else min(hard, bound)
    return max(soft, ceiling)


def default_max_connections(fd_limit: int) -> int:
    """The connection cap a descriptor limit leaves room for.

    Each client connection may hold one backend connection too, and listeners, logs, keyset
    fetches and the admin listener need a reserve (a quarter of a small limit)."""
    reserve = min(FD_RESERVE, fd_limit // 4)
    return max(1, (fd_limit - reserve) // 2)


def raise_fd_limit(bound: int = FD_LIMIT_BOUND) -> int:
    """Raise this process's soft RLIMIT_NOFILE toward the hard limit; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = fd_limit_target(soft, hard, bound)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            # Some systems (macOS) refuse values the hard limit allows: keep the current one.
            pass
    return bound if soft == resource.RLIM_INFINITY else soft


def parse_seconds(flag: str, text: str) -> float:
    """A timeout flag's value in seconds (0 < value <= a day); ValueError naming the flag."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT:  # also refuses nan and inf
        raise ValueError(
            f"{flag} must be a number of seconds greater than 0 and at most "
            f"{MAX_TIMEOUT:g} (got {text!r})"
        )
    return value


def parse_count(flag: str, text: str) -> int:
    """A count flag's value (a whole number >= 1); ValueError naming the flag."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{flag} must be a whole number of at least 1 (got {text!r})")
    return value


def canned_response(
    status: int,
    payload: dict[str, str],
    default_headers: Iterable[tuple[bytes, bytes]] = (),
    extra: bytes = b"",
) -> bytes:
    """A complete `connection: close` JSON response, written straight to the transport."""
    body = orjson.dumps(payload)
    head = [STATUS_LINE[status]]
    head.extend(b"%s: %s\r\n" % (name, value) for name, value in default_headers)
    head.append(
        b"content-type: application/json\r\ncache-control: no-store\r\n"
        b"connection: close\r\ncontent-length: %d\r\n%s\r\n" % (len(body), extra)
    )
    return b"".join(head) + body


class ConnectionGuard:
    """What the connections of one server share: the limits, the counts, the canned answers."""

    def __init__(
        self, limits: Limits, counts: ConnectionCounts, uncapped_ports: Iterable[int] = ()
    ) -> None:
        self.header_timeout = limits.header_timeout
        self.idle_timeout = limits.idle_timeout
        # The HTTP parser keeps a request head in memory until it is complete, whatever its
        # size: bound it while it arrives (the request line and per-line framing get room of
        # their own; the exact --max-header-bytes check runs once the head is complete).
        self.max_head_bytes = 2 * limits.max_header_bytes + HEAD_LINE_ROOM
        self.max_connections = limits.max_connections or default_max_connections(
            resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        )
        self.counts = counts
        counts.limit = self.max_connections
        # The loopback admin listener stays reachable (metrics, health) while the cap is hit.
        self.uncapped_ports = frozenset(uncapped_ports)
        # Set when the drain starts: every response from then on closes its connection.
        self.draining = False
        self._refusal = {
            "error": "temporarily_unavailable",
            "error_description": f"the gateway already holds {self.max_connections} open "
            "connections, its limit (--max-connections); try again shortly",
        }
        self._timeout = {
            "error": "request_timeout",
            "error_description": "the request head was not complete within "
            f"{self.header_timeout:g}s (--header-timeout)",
        }
        self._too_large = {
            "error": "request_header_fields_too_large",
            "error_description": f"the request head grew past {self.max_head_bytes} bytes "
            f"before it was complete (--max-header-bytes "
            f"{limits.max_header_bytes})",
        }
        self._last_refusal_log = -math.inf

    def refusal(self, default_headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The 503 written to a connection over the cap."""
        now = time.monotonic()
        if now - self._last_refusal_log >= REFUSAL_LOG_INTERVAL:
            self._last_refusal_log = now
            log.warning(
                "refusing connections: %d are open (--max-connections %d)",
                self.counts.open,
                self.max_connections,
            )
        return canned_response(503, self._refusal, default_headers, b"retry-after: 1\r\n")

    def head_too_large(self, default_headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The 431 written to a connection whose unfinished request head is too large."""
        return canned_response(431, self._too_large, default_headers)

    def request_timeout(self, default_headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The 408 written to a connection whose request head stalled."""
        return canned_response(408, self._timeout, default_headers)


# Called directly rather than through super(): these run for every request.
_data_received = HttpToolsProtocol.data_received
_on_message_begin = HttpToolsProtocol.on_message_begin
_on_headers_complete = HttpToolsProtocol.on_headers_complete
_on_message_complete = HttpToolsProtocol.on_message_complete


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the guard's timeouts and connection cap."""

    guard: ConnectionGuard  # set on the subclass protocol_class() makes

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._phase = _BETWEEN
        self._counted = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_read = 0.0
        self._head_bytes = 0

    # uvicorn narrows asyncio.Protocol's BaseTransport to Transport the same way.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Refuse over the cap; otherwise count the connection and start the head timer."""
        super().connection_made(transport)
        guard = self.guard
        if self.server is None or self.server[1] not in guard.uncapped_ports:
            counts = guard.counts
            if counts.open >= guard.max_connections:
                counts.refused += 1
                transport.write(guard.refusal(self.server_state.default_headers))
                transport.close()
                return
            counts.open += 1
            self._counted = True
        self._head_timer = self.loop.call_later(guard.header_timeout, self._head_timed_out)
        # Responses leave in one write per loop turn (head and body together).
        self.transport = CoalescingTransport(transport, self.loop)

    def connection_lost(self, exc: Exception | None) -> None:
        """Uncount the connection and drop its timers."""
        if self._counted:
            self._counted = False
            self.guard.counts.open -= 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse, then arm whichever timer the parser's new position needs (usually none)."""
        _data_received(self, data)
        # The common case, a whole request in one read, ends between requests with its
        # response pending: no timer, and this is all the per-request cost.
        phase = self._phase
        if phase == _BODY:
            # Only a body still arriving needs the time of its last read (the idle timer).
            self._last_read = self.loop.time()
            if self._idle_timer is None and not self.transport.is_closing():
                self._idle_timer = self.loop.call_later(
                    self.guard.idle_timeout, self._idle_timed_out
                )
        elif phase == _HEAD and self._head_grew_too_large(len(data)):
            return
        elif (
            self._head_timer is None
            and (phase == _HEAD or self.cycle is None or self.cycle.response_complete)
            and not self.transport.is_closing()
        ):
            # A head split over reads, or bytes between requests that start no request (the
            # parser skips empty lines): either way the keep-alive timer was just cancelled,
            # and without this a client could hold the connection by trickling them.
            self._head_timer = self.loop.call_later(self.guard.header_timeout, self._head_timed_out)

    def _head_grew_too_large(self, size: int) -> bool:
        # Only heads split over reads get here (a whole head in one read is checked by the
        # application once parsed), so this costs nothing on the common path.
        self._head_bytes += size
        if self._head_bytes <= self.guard.max_head_bytes or self.transport.is_closing():
            return False
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(self.guard.head_too_large(self.server_state.default_headers))
        self.transport.close()
        return True

    def on_message_begin(self) -> None:
        """A request head starts."""
        self._phase = _HEAD
        self._head_bytes = 0
        _on_message_begin(self)

    def on_headers_complete(self) -> None:
        """The head is complete: its timer stops, the body (if any) follows. While draining,
        its response closes the connection (`Connection: close`)."""
        self._phase = _BODY
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        _on_headers_complete(self)
        if self.guard.draining and self.cycle is not None:
            self.cycle.keep_alive = False

    def on_message_complete(self) -> None:
        """The request is complete: no client-side timer until the next one begins."""
        self._phase = _BETWEEN
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        _on_message_complete(self)

    def shutdown(self) -> None:
        """The drain started: a request being served or arriving gets its answer, and that
        closes the connection; an idle one closes once idle for DRAIN_IDLE_CLOSE."""
        cycle = self.cycle
        if self._phase == _HEAD or self.transport.is_closing():
            return  # its answer says `Connection: close` (the guard drains)
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False
            return
        wait = DRAIN_IDLE_CLOSE - self._idle_for()
        if wait <= 0:
            self.transport.close()
            return
        # The keep-alive timer, sooner (a request that comes cancels it, as it does).
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
        self.timeout_keep_alive_task = self.loop.call_later(wait, self.timeout_keep_alive_handler)

    def _idle_for(self) -> float:
        """Seconds since the last response ended (or the connection opened), read from the
        timer armed then."""
        now = self.loop.time()
        if self.timeout_keep_alive_task is not None:
            return now - self.timeout_keep_alive_task.when() + self.timeout_keep_alive
        if self._head_timer is not None:
            return now - self._head_timer.when() + self.guard.header_timeout
        return math.inf

    def timeout_keep_alive_handler(self) -> None:
        """Close an idle keep-alive connection, unless a request has begun since."""
        # A head or body that began before the previous response ended has its own timer.
        if self._phase == _BETWEEN:
            super().timeout_keep_alive_handler()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport.is_closing():
            return
        if self.flow.read_paused:
            # The gateway stopped reading (a pipelined request waits): not the client's stall.
            self._head_timer = self.loop.call_later(self.guard.header_timeout, self._head_timed_out)
            return
        self.guard.counts.header_timeouts += 1
        # A 408 only for a request that began and when no response is being written: a client
        # that sent nothing gets nothing, and a streaming response must not be cut by one.
        if self._phase == _HEAD and (self.cycle is None or self.cycle.response_complete):
            transport.write(self.guard.request_timeout(self.server_state.default_headers))
        transport.close()

    def _idle_timed_out(self) -> None:
        self._idle_timer = None
        if self._phase != _BODY or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused:
            # The application has not taken the body read so far yet: not the client's stall.
            self._last_read = now
        remaining = self._last_read + self.guard.idle_timeout - now
        if remaining > 0:
            self._idle_timer = self.loop.call_later(remaining, self._idle_timed_out)
            return
        self.guard.counts.idle_timeouts += 1
        # The application may be mid-request: closing tells it (http.disconnect), whereas
        # writing a response here could interleave with one it starts.
        self.transport.close()


def protocol_class(guard: ConnectionGuard) -> type[GuardedHttpToolsProtocol]:
    """A protocol class bound to `guard`, for `uvicorn.Config(http=...)`."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"guard": guard})
