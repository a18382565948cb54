"""Talking to one target: the request the gateway sends it (the client's headers as the reverse
proxy forwards them, with the target's own session and protocol version), and its answer, read
whole (initialize, lists) or handed back to be streamed (calls). Every failure is one exception,
Unavailable, raised within the target's timeout (its own, else the route's); a target that no
longer knows its session raises SessionGone, so the session can be opened again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ... import audit, jsonrpc
from ...asgi import Headers, Scope
from ...mcp_methods import INITIALIZE, INITIALIZED
from ..reverse_proxy import GATEWAY_SET, dropped_request_headers, upstream_request_headers
from ..upstream import (
    InvalidRequestHead,
    Upstream,
    UpstreamError,
    UpstreamResponse,
    UpstreamTlsError,
)
from .session import TargetSession
from .sse import event_data

log = logging.getLogger("mcp_oauth_gateway.federation")

# A list or initialize answer is read whole; beyond this it is refused.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
# What the gateway sets per target instead of passing the client's: the client's session and
# protocol version are the gateway's, and the body is the gateway's own rewriting of it.
_REPLACED = frozenset(
    {
        b"mcp-session-id",
        b"mcp-protocol-version",
        b"accept",
        b"accept-encoding",
        b"content-type",
        b"content-length",
        b"content-encoding",
        b"last-event-id",
        b"mcp-method",
        b"mcp-name",
    }
)
_ACCEPT = b"application/json, text/event-stream"
# 4xx answers that say nothing of the client's request: a lost session, a timeout, a limit.
_NOT_THE_CLIENTS = frozenset({404, 408, 429})


class Unavailable(Exception):
    """The target did not answer usefully (down, slow, an HTTP error, an unreadable answer)."""

    # Why, as the target's health counts it (a bounded label), and whether the target is
    # down for it; None: it answered, and nothing is counted against it. `down` None: the
    # target was not asked, its `up` stays as it was.
    reason: str | None = "bad_answer"
    down: bool | None = True


class TimedOut(Unavailable):
    """The target did not answer within its timeout."""

    reason = "timeout"


class Unreachable(Unavailable):
    """The target could not be reached (refused, reset, unresolved), or not sent to."""

    reason = "unreachable"


class HttpError(Unavailable):
    """The target answered an HTTP status that is no answer (5xx, 408, 429, a stray 404)."""

    reason = "http_error"


class SessionGone(Unavailable):
    """The target answered 404 to its session id: it ended or lost the session."""

    reason = "session_lost"
    down = False


class Refused(Unavailable):
    """The target refused the client's request itself (an HTTP 4xx other than a lost session):
    its Origin, Host or headers, which the same request to any target would not change."""

    reason = "refused"
    down = False

    def __init__(self, status: int):
        super().__init__(f"it answered HTTP {status}")
        self.status = status


class NoStream(Unavailable):
    """The target offers no GET stream (it answered 405, MCP's way to say so)."""

    reason = None
    down = False


class NoCredential(Unavailable):
    """The gateway could not get the target's own credential (the provider refused the token
    exchange, or could not be reached): the target is not sent the request at all, never with
    the caller's token instead. The provider failed, not the target: counted, but its `up`
    stays as it was."""

    reason = "no_credential"
    down = None


class ErrorAnswer(Unavailable):
    """The target answered with a JSON-RPC error (a list it does not offer, say): it is up."""

    reason = None
    down = False


def unavailable(name: str, failure: Unavailable) -> str:
    """What a client is told of a call its target could not take (and the audit trail too)."""
    return f"the MCP server {name!r} behind this route is unavailable: {failure}"


def refusal_status(failures: Iterable[Unavailable]) -> int:
    """The HTTP status of a request every target failed: the targets' own 4xx when each
    refused it with one (the same, or else 400), otherwise 200 with a JSON-RPC error."""
    every = list(failures)
    statuses = {f.status for f in every if isinstance(f, Refused)}
    if not every or not all(isinstance(f, Refused) for f in every):
        return 200
    return statuses.pop() if len(statuses) == 1 else 400


# A target's own credential headers, by its name (built from the policy by `serving`); raises
# NoCredential when the target cannot have one.
CredentialHeaders = Callable[[Scope, str], Awaitable[Headers]]


def _header(headers: Headers, name: bytes) -> bytes | None:
    return next((v for k, v in headers if k.lower() == name), None)


def _wire_error(response: UpstreamResponse) -> bool:
    """Whether an answer on the 2026-07-28 wire is a JSON-RPC error under an HTTP error status
    (400 for a request refused, 404 for an unknown method): an answer, not a failure."""
    content_type = (_header(response.headers, b"content-type") or b"").lower()
    return response.status in (400, 404) and content_type.startswith(b"application/json")


class TargetLink:
    """A federated route's way to its targets: the pool, the route's and each target's
    timeout, its headers."""

    def __init__(
        self,
        upstream: Upstream,
        timeout: float,
        trust_forwarded: bool,
        kept: frozenset[bytes] = GATEWAY_SET,
        latency: Callable[[float], None] | None = None,
        credentials: CredentialHeaders | None = None,
        owned: frozenset[bytes] = frozenset(),
    ):
        self.upstream = upstream
        # The route's upstream latency (time to the response head), as the reverse proxy's.
        self.latency = latency
        self.timeout = timeout
        # Targets' own timeouts by name (`spec.mcp.targets[].timeout`), set by the stage from
        # the running configuration; a target without one has the route's.
        self.timeouts: dict[str, float] = {}
        self.trust_forwarded = trust_forwarded
        self.drop = dropped_request_headers(trust_forwarded) | _REPLACED
        self.kept = kept - _REPLACED
        # Credentials per target (None: every target gets what the backend-credentials stage
        # set). Whatever any target's credential sets (`owned`) is never passed on from the
        # request, to any target.
        self.credentials = credentials
        self.drop |= owned

    def timeout_of(self, session: TargetSession) -> float:
        """How long the target is given for an answer: its own timeout, or the route's."""
        return self.timeouts.get(session.target.name, self.timeout)

    def _headers(self, scope: Scope, session: TargetSession) -> Headers:
        target = session.target
        headers = upstream_request_headers(
            scope, target.authority.encode(), self.trust_forwarded, self.drop, self.kept
        )
        headers += [
            (b"accept", _ACCEPT),
            (b"accept-encoding", b"identity"),
            (b"content-type", b"application/json"),
        ]
        if session.session_id is not None:
            headers.append((b"mcp-session-id", session.session_id))
        if session.version is not None:
            headers.append((b"mcp-protocol-version", session.version.encode()))
        if session.wire is not None:
            headers.extend(session.wire)
        return headers

    async def _credential(self, scope: Scope, name: str) -> Headers:
        """The target's own credential headers; NoCredential when it cannot have one."""
        assert self.credentials is not None
        try:
            return await self.credentials(scope, name)
        except NoCredential as exc:
            # A list or initialize goes on without this target: a note on its audit line.
            audit.note(scope, f"backend-credentials: target {name!r}: {exc}")
            raise

    async def send(
        self,
        scope: Scope,
        session: TargetSession,
        body: bytes,
        method: str = "POST",
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> UpstreamResponse:
        """The target's response to `body` (with the gateway's `extra` headers) once its head
        is in; Unavailable or SessionGone."""
        target = session.target
        url = target.url
        timeout = self.timeout_of(session)
        headers = [*self._headers(scope, session), *extra]
        if self.credentials is not None:
            # Got only now: a target the request does not reach costs no exchange.
            headers += await self._credential(scope, target.name)
        started = time.perf_counter()
        try:
            response = await self.upstream.request(
                method, url, headers, body, timeout, tls=target.tls
            )
        except TimeoutError:
            raise TimedOut(f"it did not answer within {timeout:g}s") from None
        except InvalidRequestHead as exc:
            raise Unreachable(f"the request for it was not sent: {exc}") from None
        except UpstreamTlsError as exc:
            log.warning("federated target %s unreachable: %s", target.name, exc)
            raise Unreachable(f"it is unreachable: {exc}") from None
        except (UpstreamError, OSError) as exc:
            log.warning("federated target %s unreachable: %s", target.name, exc)
            raise Unreachable("it is unreachable") from None
        if self.latency is not None:
            self.latency(time.perf_counter() - started)
        if response.status == 404 and session.session_id is not None:
            response.release()
            raise SessionGone("it no longer knows the session")
        if response.status == 405 and method == "GET":
            response.release()
            raise NoStream("it offers no GET stream")
        if session.wire is not None and _wire_error(response):
            return response  # the JSON-RPC error is the answer: read by the caller
        if not 200 <= response.status < 300:
            response.release()
            if 400 <= response.status < 500 and response.status not in _NOT_THE_CLIENTS:
                raise Refused(response.status)
            raise HttpError(f"it answered HTTP {response.status}")
        return response

    async def ask(
        self, scope: Scope, session: TargetSession, body: bytes, request_id: object
    ) -> tuple[dict[str, object], Headers]:
        """The target's JSON-RPC response to the request in `body` (and its response headers),
        read whole within the target's timeout."""
        timeout = self.timeout_of(session)
        try:
            async with asyncio.timeout(timeout):
                response = await self.send(scope, session, body)
                try:
                    return await _response_of(response, request_id), response.headers
                finally:
                    response.release()
        except TimeoutError:
            raise TimedOut(f"it did not answer within {timeout:g}s") from None
        except UpstreamError as exc:
            raise Unavailable(f"its answer broke off: {exc}") from None
        except ValueError as exc:  # an event past MAX_ANSWER_BYTES
            raise Unavailable(str(exc)) from None

    async def answer(
        self, session: TargetSession, response: UpstreamResponse, request_id: object
    ) -> dict[str, object]:
        """The JSON-RPC response in a call's JSON answer (its head already in), read whole
        within the target's timeout."""
        timeout = self.timeout_of(session)
        try:
            async with asyncio.timeout(timeout):
                return await _response_of(response, request_id)
        except TimeoutError:
            raise TimedOut(f"it did not answer within {timeout:g}s") from None
        except UpstreamError as exc:
            raise Unavailable(f"its answer broke off: {exc}") from None

    async def listen(
        self, scope: Scope, session: TargetSession, cursor: str | None = None
    ) -> UpstreamResponse:
        """The target's GET stream (its head in), resumed after its own event id `cursor`
        when given; NoStream when it offers none."""
        extra = [(b"last-event-id", cursor.encode())] if cursor is not None else []
        response = await self.send(scope, session, b"", "GET", extra)
        content_type = (_header(response.headers, b"content-type") or b"").lower()
        if not content_type.startswith(b"text/event-stream"):
            response.release()
            raise NoStream("it answered GET without an event stream")
        return response

    async def tell(self, scope: Scope, session: TargetSession, body: bytes) -> None:
        """Send a notification (or end the session with DELETE when `body` is empty)."""
        timeout = self.timeout_of(session)
        try:
            async with asyncio.timeout(timeout):
                response = await self.send(scope, session, body, "POST" if body else "DELETE")
                response.release()
        except TimeoutError:
            raise TimedOut(f"it did not answer within {timeout:g}s") from None

    async def open(
        self, scope: Scope, session: TargetSession, params: dict[str, object], notify: bool
    ) -> None:
        """Open the target's session with the client's initialize params; with `notify`, tell it
        the client is initialized (a target opened after the client said so)."""
        session.close()
        body = jsonrpc.request(INITIALIZE, INITIALIZE, params)
        message, headers = await self.ask(scope, session, body, INITIALIZE)
        result = message.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("protocolVersion"), str):
            raise Unavailable(f"its initialize answer is not a result: {message.get('error')}")
        capabilities = result.get("capabilities")
        session.capabilities = capabilities if isinstance(capabilities, dict) else {}
        instructions = result.get("instructions")
        session.instructions = instructions if isinstance(instructions, str) else ""
        session.session_id = _header(headers, b"mcp-session-id")
        session.version = result["protocolVersion"]
        if notify:
            await self.tell(scope, session, jsonrpc.request(None, INITIALIZED, None))


async def _response_of(response: UpstreamResponse, request_id: object) -> dict[str, object]:
    """The JSON-RPC response to `request_id` in a JSON or SSE answer."""
    content_type = (_header(response.headers, b"content-type") or b"").lower()
    if content_type.startswith(b"text/event-stream"):
        async for data in event_data(response.chunks(), MAX_ANSWER_BYTES):
            message = _message(data)
            if message.get("id") == request_id and ("result" in message or "error" in message):
                return message
            # What a target sends within an answer read whole (initialize, a list) is no
            # call's the client could be told about: dropped. A call's stream is relayed.
        raise Unavailable("its event stream ended without an answer")
    body = response.complete_body()
    if body is None:
        chunks = []
        size = 0
        async for chunk in response.chunks():
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise Unavailable(f"its answer is larger than {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
    return _message(body)


def _message(data: bytes) -> dict[str, object]:
    try:
        message = jsonrpc.read_message(data)
    except ValueError:
        raise Unavailable("its answer is not JSON") from None
    if not isinstance(message, dict):
        raise Unavailable("its answer is not a JSON-RPC message")
    return message
