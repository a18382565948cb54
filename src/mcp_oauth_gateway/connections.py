"""Connection limits for the HTTP server: a header-read timeout, an idle timeout for request
bodies and between requests, and a cap on open connections.

uvicorn's httptools protocol arms its keep-alive timer only after a first response and never
bounds how long a request head or body may take, so a client that connects and then trickles
bytes (or sends nothing) holds a descriptor for as long as it likes. The protocol below adds
those bounds without a timer per chunk: a head gets one timer, and a body that spans several
reads gets one timer that re-arms itself from the time of the last read.

The protocol is uvicorn's httptools protocol (httptools parses every request; uvicorn's server
runs listeners and lifespan) with less work per request than uvicorn's generic code: the scope
is built once the head is complete, in one literal; each request is answered by a RequestCycle
(request_cycle.py: one write per response, the head checked at once by response_head.py); and
the keep-alive timer is one per connection, armed when a response ends with none armed and
re-armed from the time of the last response when it fires early, where uvicorn arms and
cancels one per request."""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import time
from collections.abc import Iterable
from typing import Any

import httptools
import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from .asgi import Limits
from .dataplane.metrics import ConnectionCounts
from .request_cycle import METHODS, RequestCycle, request_target
from .response_head import STATUS_LINES, default_lines

log = logging.getLogger("mcp_oauth_gateway")

FD_LIMIT_BOUND = 1 << 16
FD_RESERVE = 256
MAX_TIMEOUT = 86_400.0
# Under a flood every refusal would otherwise log a line: one warning per interval is enough.
REFUSAL_LOG_INTERVAL = 60.0
HEAD_LINE_ROOM = 16 * 1024


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
    head = [STATUS_LINES[status]]
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


# Once draining, how long a connection must have been idle before it is closed. A client may
# write its next request on an idle connection at the very moment the server closes it, and that
# request is lost; a client's pool no longer reuses a connection idle this long (httpx: 5 s,
# undici, Node's fetch: 4 s), so closing it then loses nothing. A request that comes sooner is
# answered, with `Connection: close`.
DRAIN_IDLE_CLOSE = 6.0

# Where the request parser is in the byte stream; decides which timer applies.
BETWEEN, HEAD, BODY = 0, 1, 2


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """A client connection: requests parsed by httptools, each answered by a RequestCycle,
    within the guard's limits."""

    guard: ConnectionGuard  # set on the subclass protocol_class() makes

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if config.ws_protocol_class is not None or config.limit_concurrency is not None:
            raise ValueError("the gateway's protocol serves no WebSockets and no concurrency cap")
        self.cycle: RequestCycle | None = None  # type: ignore[assignment]
        self._phase = BETWEEN
        self._counted = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._idle_limit = float(self.timeout_keep_alive)
        self._last_read = 0.0
        self._head_bytes = 0
        self._raw_root = self.root_path.encode("ascii")

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
        self._idle_since = self.loop.time()
        self._head_timer = self.loop.call_later(guard.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        """Uncount the connection, drop its timers and tell the request in flight."""
        self.connections.discard(self)
        if self._counted:
            self._counted = False
            self.guard.counts.open -= 1
        for timer in (self._head_timer, self._idle_timer, self._keep_alive_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._idle_timer = self._keep_alive_timer = None
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.wake()
        if self.flow is not None:
            self.flow.resume_writing()
        if exc is None:
            self.transport.close()
        self.parser = None  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        """Parse, then arm whichever timer the parser's new position needs (usually none)."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()
        # The common case, a whole request in one read, ends between requests with its
        # response pending: no timer, and this is all the per-request cost.
        phase = self._phase
        if phase == BODY:
            # Only a body still arriving needs the time of its last read (the idle timer).
            self._last_read = self.loop.time()
            if self._idle_timer is None and not self.transport.is_closing():
                self._idle_timer = self.loop.call_later(
                    self.guard.idle_timeout, self._idle_timed_out
                )
        elif phase == HEAD:
            # A head split over reads (a whole head in one read is checked by the application
            # once parsed): bounded in size while it arrives, and in time by its timer.
            if self._head_grew_too_large(len(data)):
                return
            if self._head_timer is None and not self.transport.is_closing():
                self._head_timer = self.loop.call_later(
                    self.guard.header_timeout, self._head_timed_out
                )

    def send_400_response(self, msg: str) -> None:
        """Answer a request the parser refused with 400 and close; when it came pipelined
        behind requests still being answered, a 400 now would land inside their answers:
        they are answered, the last one closing the connection, and nothing more is read."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            super().send_400_response(msg)
            return
        cycle.keep_alive = False
        self.flow.pause_reading()

    def _head_grew_too_large(self, size: int) -> bool:
        self._head_bytes += size
        if self._head_bytes <= self.guard.max_head_bytes or self.transport.is_closing():
            return False
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(self.guard.head_too_large(self.server_state.default_headers))
        self.transport.close()
        return True

    # httptools' callbacks (on_url is uvicorn's).

    def on_message_begin(self) -> None:
        """A request head starts."""
        self._phase = HEAD
        self._head_bytes = 0
        self.url = b""
        self.expect_100_continue = False
        self.headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        """A header line: the name lowercased, the value without trailing spaces or tabs
        (llhttp keeps them; RFC 9110 5.5 excludes them from the value)."""
        name = name.lower()
        if name == b"expect" and value.rstrip(b" \t").lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        """The head is complete: its timer stops, its cycle starts (or waits its turn behind
        a response still being written), the body (if any) follows."""
        self._phase = BODY
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        parser = self.parser
        method = parser.get_method()
        version = parser.get_http_version()
        path, raw_path, query = request_target(self.url)
        scope = {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
            "method": METHODS.get(method) or method.decode("ascii"),
            "path": self.root_path + path,
            "raw_path": self._raw_root + raw_path,
            "query_string": query,
        }
        # While draining, every answer closes its connection (`Connection: close`).
        keep_alive = version == "1.1" and parser.should_keep_alive() and not self.guard.draining
        cycle = RequestCycle(
            scope,
            self.transport,
            self.flow,
            self.loop,
            default_lines(self.server_state.default_headers),
            keep_alive,
            self.expect_100_continue,
            self.on_response_complete,
        )
        previous = self.cycle
        self.cycle = cycle
        if previous is None or previous.response_complete:
            self._start(cycle)
        else:
            # A pipelined request waits for the response before it, reading paused.
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))  # type: ignore[arg-type]

    def _start(self, cycle: RequestCycle) -> None:
        task = self.loop.create_task(cycle.run_asgi(self.app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_body(self, body: bytes) -> None:
        """A part of the request body (dropped once its response is complete)."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.body_received(body)

    def on_message_complete(self) -> None:
        """The request is complete: no client-side timer until the next one begins."""
        self._phase = BETWEEN
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.more_body = False
            cycle.wake()

    def on_response_complete(self) -> None:
        """A response ended: start the next pipelined request, or wait for one (keep-alive)."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        flow = self.flow
        if flow.read_paused:
            flow.resume_reading()
        if self.pipeline:
            cycle, _ = self.pipeline.pop()
            self._start(cycle)  # type: ignore[arg-type]
            return
        self._idle_since = self.loop.time()
        if self._keep_alive_timer is None:
            self._keep_alive_timer = self.loop.call_later(self._idle_limit, self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        """Close the connection if it has been idle for the keep-alive timeout; look again
        then if a response ended since the timer was armed."""
        self._keep_alive_timer = None
        cycle = self.cycle
        if (
            self._phase != BETWEEN
            or (cycle is not None and not cycle.response_complete)
            or self.transport.is_closing()
        ):
            return  # a request is under way: its response arms the timer again
        wait = self._idle_since + self._idle_limit - self.loop.time()
        if wait > 0:
            self._keep_alive_timer = self.loop.call_later(wait, self._keep_alive_due)
        else:
            self.transport.close()

    def shutdown(self) -> None:
        """The drain started: a request being served or arriving gets its answer, and that
        closes the connection; an idle one closes once idle for DRAIN_IDLE_CLOSE."""
        cycle = self.cycle
        if self._phase == HEAD or self.transport.is_closing():
            return  # its answer says `Connection: close` (the guard drains)
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False
            return
        self._idle_limit = min(self._idle_limit, DRAIN_IDLE_CLOSE)
        wait = self._idle_since + self._idle_limit - self.loop.time()
        if wait <= 0:
            self.transport.close()
            return
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
        self._keep_alive_timer = self.loop.call_later(wait, self._keep_alive_due)

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
        if self._phase == HEAD and (self.cycle is None or self.cycle.response_complete):
            transport.write(self.guard.request_timeout(self.server_state.default_headers))
        transport.close()

    def _idle_timed_out(self) -> None:
        self._idle_timer = None
        if self._phase != BODY or self.transport.is_closing():
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
