"""The `backend-credentials` stage of a userOAuth route: the backend gets
`Authorization: Bearer <the caller's own token there>`, never the caller's token; a caller
without one is asked to connect (`elicitation`), and a token the backend refuses (revoked
upstream) is dropped and asked for again, never shown to the client as the gateway's 401."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .. import audit
from ..asgi import (
    CLAIMS_KEY,
    ASGIApp,
    BodyTooLarge,
    Headers,
    Message,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    replay,
    request_origin,
    send_error,
    send_json,
    send_too_large,
)
from ..jsonrpc import (
    CONNECT_FIRST,
    INVALID_PARAMS,
    Malformed,
    error,
    read_request,
    result,
    write_message,
)
from ..mcp_headers import is_stateless
from ..mcp_methods import CALL_TOOL, DISCOVER, INPUT_METHODS
from ..usertokens.grants import GrantKey
from ..usertokens.locking import StoreError
from .access import Unavailable, Upstream
from .connects import Asked, elicitation
from .elicitation import (
    STATE_LIFETIME,
    BadState,
    RequestState,
    connect_first_error,
    declined,
    discovered,
    input_required,
    is_gateway_state,
    open_state,
    params_digest,
    required_error,
    seal_state,
    without_retry_fields,
)
from .held_stream import hold
from .runtime import UserOAuthRuntime

STAGE = "backend-credentials"
AUTHORIZATION = b"authorization"

log = logging.getLogger("mcp_oauth_gateway.useroauth")


@dataclass(frozen=True, slots=True)
class Request:
    """One POST as this stage reads it: its JSON-RPC message (None: not one)."""

    body: bytes
    message: dict[str, object] | None
    stateless: bool

    @property
    def method(self) -> str | None:
        """The JSON-RPC method, if a request or notification."""
        method = self.message.get("method") if self.message else None
        return method if isinstance(method, str) else None

    @property
    def params(self) -> dict[str, object]:
        """The params object (empty when absent or not an object)."""
        params = self.message.get("params") if self.message else None
        return params if isinstance(params, dict) else {}


def _session_of(scope: Scope) -> str:
    """The client's Mcp-Session-Id ("" on the stateless wire)."""
    return (header(scope, b"mcp-session-id") or b"").decode("latin-1")


def caller_key(scope: Scope, backend: str) -> GrantKey | None:
    """The grant key of the verified caller (None: anonymous)."""
    claims = scope.get(CLAIMS_KEY)
    if not isinstance(claims, dict):
        return None
    iss, sub = claims.get("iss"), claims.get("sub")
    if not isinstance(iss, str) or not isinstance(sub, str) or not iss or not sub:
        return None
    return GrantKey(iss, sub, backend)


def _message(body: bytes) -> dict[str, object] | None:
    try:
        return read_request(body)
    except Malformed:
        return None


class _Refused:
    """Passes the backend's answer on unless it is a 401 (the upstream token refused)."""

    def __init__(self, send: Send):
        self._send = send
        self.refused = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 401:
            self.refused = True
        if not self.refused:
            await self._send(message)


class UserOAuthStage:
    """Gives one backend each caller's own upstream token; or, on a federated route
    (`inject` False, one stage per userOAuth target, `siblings` their grant keys), checks that
    the caller connected that target before the federation talks to it (it sets the token)."""

    def __init__(
        self,
        app: ASGIApp,
        upstream: Upstream,
        backend: str,
        runtime: UserOAuthRuntime,
        mcp_path: str,
        max_body: int,
        inject: bool = True,
        siblings: frozenset[str] = frozenset(),
    ):
        self.inject = inject
        self.siblings = siblings
        self.app = app
        self.upstream = upstream
        self.backend = backend
        self.runtime = runtime
        self.mcp_path = mcp_path
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request (a store outage is a 503, never a request without the token)."""
        try:
            await self._serve(scope, receive, send)
        except StoreError as exc:
            # Raised before any answer started: every store call comes before the answer. The
            # store's address and the reason go to the log, not to the caller.
            log.warning("user token store unavailable at %s: %s", scope["path"][:200], exc)
            why = "the store of users' upstream grants is unavailable (failing over?); try again"
            audit.deny(scope, STAGE, why)
            await send_error(send, 503, "temporarily_unavailable", why, [(b"retry-after", b"5")])

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.inject:
            scope["headers"] = [h for h in scope["headers"] if h[0] != AUTHORIZATION]
        key = caller_key(scope, self.backend)
        if key is None:
            why = f"{self.upstream.service} needs a signed-in caller: send a bearer token"
            audit.deny(scope, STAGE, why)
            await send_error(send, 401, "invalid_token", why)
            return
        try:
            outcome = await self.runtime.access.token(key, self.upstream)
        except Unavailable as exc:
            why = f"no {self.upstream.service} token for the backend now: {exc}"
            audit.deny(scope, STAGE, why)
            await send_error(send, 503, "temporarily_unavailable", why, [(b"retry-after", b"5")])
            return
        if outcome.event is not None:
            audit.event(scope, f"upstream-token-{outcome.event}")
        if scope["method"] == "POST":
            await self._post(scope, receive, send, key, outcome.token)
        elif outcome.token is not None:
            await self._with_token(scope, receive, send, key, outcome.token)
        elif scope["method"] == "GET":
            await self._hold(scope, receive, send, key)
        else:
            await self._not_connected(scope, send, key)

    async def _post(
        self, scope: Scope, receive: Receive, send: Send, key: GrantKey, token: str | None
    ) -> None:
        try:
            body = await read_body(receive, self.max_body)
        except BodyTooLarge as exc:
            audit.deny(scope, STAGE, str(exc))
            await send_too_large(send, exc)
            return
        if body is None:
            return  # the client went away
        request = Request(body, _message(body), is_stateless(scope["headers"]))
        # A state of the backend's own (its own input_required round) is its business.
        if request.stateless and is_gateway_state(request.params.get("requestState")):
            mine = await self._state_checked(scope, send, key, request)
            if mine is None:
                return
            if token is not None and mine:
                assert request.message is not None
                params = without_retry_fields(request.params)
                body = write_message({**request.message, "params": params})
                request = Request(body, request.message, True)
            elif mine and declined(request.params):
                await self._declined(scope, send, request)
                return
        if token is None:
            await self._ask(scope, send, key, request)
            return
        refused = await self._forward(scope, send, token, body, receive)
        if refused and self.inject:
            # Refused before it was served: tried once more with a refreshed token, if any.
            renewed = await self.runtime.access.renewed(key, self.upstream, token)
            if renewed is not None:
                audit.event(scope, "upstream-token-refreshed")
                refused = await self._forward(scope, send, renewed, body, receive)
        if refused:
            await self._dropped(scope, key)
            await self._ask(scope, send, key, request)

    async def _declined(self, scope: Scope, send: Send, request: Request) -> None:
        """The user said no to connecting: a final answer, not the same question again."""
        why = f"the user declined to connect {self.upstream.service}"
        audit.deny(scope, STAGE, why)
        request_id = request.message.get("id") if request.message else None
        text = f"{self.upstream.service} is not connected: you declined to connect it."
        if request.method == CALL_TOOL:
            failed = {"content": [{"type": "text", "text": text}], "isError": True}
            await send_json(send, 200, result(request_id, failed))
            return
        await send_json(send, 200, error(request_id, CONNECT_FIRST, text))

    async def _with_token(
        self, scope: Scope, receive: Receive, send: Send, key: GrantKey, token: str
    ) -> None:
        session = _session_of(scope)
        listener = self.runtime.streams.open(key.text(), session, send)
        try:
            refused = await self._forward(scope, send, token, None, receive, listener.send)
        finally:
            self.runtime.streams.closed(key.text(), session, listener)
        if refused:
            await self._dropped(scope, key)
            await self._not_connected(scope, send, key)

    async def _forward(
        self,
        scope: Scope,
        send: Send,
        token: str,
        body: bytes | None,
        receive: Receive,
        out: Send | None = None,
    ) -> bool:
        """Send the request on with the token; True when the backend refused the token."""
        headers: Headers = [h for h in scope["headers"] if h[0] != b"content-length"]
        if self.inject:
            # A second try replaces the first's token.
            headers = [h for h in headers if h[0] != AUTHORIZATION]
            headers.append((AUTHORIZATION, b"Bearer " + token.encode()))
        if body is not None:
            headers.append((b"content-length", str(len(body)).encode()))
            receive = replay(body, receive)
        scope["headers"] = headers
        if not self.inject:
            # The federation sets each target's token and answers for them: no 401 to catch.
            await self.app(scope, receive, out or send)
            return False
        refused = _Refused(out or send)
        await self.app(scope, receive, refused.send)
        return refused.refused

    async def _dropped(self, scope: Scope, key: GrantKey) -> None:
        await self.runtime.store.delete(key)
        audit.event(scope, "upstream-token-rejected")

    async def _state_checked(
        self, scope: Scope, send: Send, key: GrantKey, request: Request
    ) -> bool | None:
        """Whether the request's state is this stage's (False: another userOAuth target's of
        the same route, left to its stage); None when it was refused (answered)."""
        expected = RequestState(
            "", key.issuer, key.subject, key.backend, self._digest(request), 0.0
        )
        given = request.params["requestState"]
        try:
            found = open_state(given, self.runtime.keys.open, expected, time.time(), self.siblings)
        except BadState as exc:
            audit.deny(scope, STAGE, str(exc))
            request_id = request.message.get("id") if request.message else None
            await send_json(send, 400, error(request_id, INVALID_PARAMS, str(exc)))
            return None
        return found.backend == key.backend

    def _digest(self, request: Request) -> str:
        return params_digest(request.method or "", request.params)

    async def _asked(self, scope: Scope, key: GrantKey) -> Asked:
        asked = await self.runtime.connects.ask(key, self.upstream.service)
        audit.deny(
            scope,
            STAGE,
            f"{self.upstream.service} is not connected for this caller: sent the connect link",
        )
        return asked

    async def _ask(self, scope: Scope, send: Send, key: GrantKey, request: Request) -> None:
        """Answer with the connect link, in the form the request's wire has for it."""
        message = request.message
        method = request.method
        if message is None or "id" not in message or method is None:
            await self._not_connected(scope, send, key)
            return
        asked = await self._asked(scope, key)
        shown = elicitation(asked, request_origin(scope), self.mcp_path)
        request_id = message["id"]
        if not request.stateless:
            await send_json(send, 200, required_error(request_id, shown))
            session = _session_of(scope)
            if session:
                finished = self.runtime.connects.finished
                self.runtime.streams.arm(key.text(), session, asked.id, finished)
        elif method == DISCOVER:
            offered = discovered(self.upstream.service, shown.url)
            await send_json(send, 200, result(request_id, offered))
        elif method in INPUT_METHODS:
            bound = RequestState(
                asked.id,
                key.issuer,
                key.subject,
                key.backend,
                self._digest(request),
                time.time() + STATE_LIFETIME,
            )
            state = seal_state(bound, self.runtime.keys.seal)
            await send_json(send, 200, input_required(request_id, shown, state))
        else:
            await send_json(send, 200, connect_first_error(request_id, shown))

    async def _not_connected(self, scope: Scope, send: Send, key: GrantKey) -> None:
        asked = await self._asked(scope, key)
        shown = elicitation(asked, request_origin(scope), self.mcp_path)
        why = f"{shown.message} Link: {shown.url}"
        await send_error(send, 403, "upstream_authorization_required", why)

    async def _hold(self, scope: Scope, receive: Receive, send: Send, key: GrantKey) -> None:
        asked = await self._asked(scope, key)
        await hold(self.runtime, key, asked, _session_of(scope), receive, send)
