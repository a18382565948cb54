"""MCP tool-level authorization (`spec.backend.mcp.authorization`): rules evaluated per item.

Calls to a denied tool, prompt or resource are answered here and never reach the backend;
list results (JSON or SSE) lose the items the caller may not use. Only POST carries requests,
so other methods pass through untouched."""

from __future__ import annotations

import orjson

from ..asgi import (
    CLAIMS_KEY,
    TOKEN_KEY,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    header,
    send_error,
    send_json,
)
from ..controlplane.cel import CompiledExpression, outcome
from ..controlplane.snapshot import CompiledAuthorization, CompiledScopes
from .authz import DECISION_CACHE, decide, request_variables
from .mcp_messages import (
    GUARDED,
    HEADER_MISMATCH,
    INVALID_REQUEST,
    LISTS,
    Ambiguous,
    HeaderMismatch,
    McpRequest,
    denied,
    filter_result,
    read_request,
)
from .scopes import granted_scopes, lacking, send_insufficient_scope

_NAME_FIELD = {kind: field for kind, field in GUARDED.values()}


class McpAuthorization:
    """Answers denied calls itself, asks for the scopes an item needs (403 step-up), and
    filters list results item by item."""

    def __init__(
        self,
        app: ASGIApp,
        rules: CompiledAuthorization | None,
        max_body_bytes: int,
        scopes: CompiledScopes | None = None,
        prm_path: str | None = None,
    ):
        self.app = app
        self.rules = rules
        self.scopes = scopes
        self.prm_path = prm_path
        self.max_body_bytes = max_body_bytes
        expressions = [*(rules.expressions if rules else ()), *_matches(scopes)]
        self.needs_request = any(e.uses_request for e in expressions)
        # Rules over the token and the item alone answer the same for the token's whole life,
        # so a session's lists and calls evaluate each item once.
        self._decisions: dict[tuple[str, str, str], bool] | None = (
            None if self.needs_request else {}
        )
        self._needed_cache: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def allowed(self, scope: Scope, kind: str, name: str | None) -> bool:
        """Whether the caller may use the item `name` of `kind` (tool, prompt or resource)."""
        if name is None or "\x00" in name:
            # The CEL runtime reads strings only up to a NUL ("echo\x00rm" would pass as
            # "echo"): such an item can never be authorized.
            return False
        if self.rules is None:
            return True
        cache = self._decisions
        token = scope.get(TOKEN_KEY)
        if cache is not None and token is not None:
            key = (token, kind, name)
            hit = cache.get(key)
            if hit is None:
                hit = self._decide(scope, kind, name)
                if len(cache) >= DECISION_CACHE:
                    del cache[next(iter(cache))]
                cache[key] = hit
            return hit
        return self._decide(scope, kind, name)

    def _activation(self, scope: Scope, kind: str, name: str) -> dict[str, object]:
        activation: dict[str, object] = {
            "jwt": scope.get(CLAIMS_KEY, {}),
            "mcp": {kind: {_NAME_FIELD[kind]: name}},
        }
        if self.needs_request:
            activation["request"] = request_variables(scope)
        return activation

    def _decide(self, scope: Scope, kind: str, name: str) -> bool:
        assert self.rules is not None
        return decide(self.rules, self._activation(scope, kind, name))

    def needed_scopes(self, scope: Scope, kind: str, name: str) -> tuple[str, ...]:
        """Every scope a call of the item needs: the route's and each matching rule's. A match
        that cannot be evaluated counts as matching (fail closed)."""
        if self.scopes is None:
            return ()
        token = scope.get(TOKEN_KEY)
        if self.needs_request or token is None:
            return self._needed(scope, kind, name)
        key = (token, kind, name)
        hit = self._needed_cache.get(key)
        if hit is None:
            hit = self._needed(scope, kind, name)
            if len(self._needed_cache) >= DECISION_CACHE:
                del self._needed_cache[next(iter(self._needed_cache))]
            self._needed_cache[key] = hit
        return hit

    def _needed(self, scope: Scope, kind: str, name: str) -> tuple[str, ...]:
        scopes = self.scopes
        assert scopes is not None
        needed = list(scopes.required)
        activation = self._activation(scope, kind, name)
        for rule in scopes.items:
            if kind in rule.kinds and outcome(rule.match, activation) is not False:
                needed.extend(rule.required)
        return tuple(dict.fromkeys(needed))

    async def _lacks_scopes(self, scope: Scope, send: Send, request: McpRequest) -> bool:
        """Answer 403 insufficient_scope when the token lacks a scope the call needs."""
        assert request.kind is not None
        assert request.name is not None
        needed = self.needed_scopes(scope, request.kind, request.name)
        if self.scopes is None or not needed:
            return False
        missing = lacking(needed, granted_scopes(scope.get(CLAIMS_KEY, {}), self.scopes))
        if not missing:
            return False
        operation = f"{request.method} of {request.name[:200]!r}"
        await send_insufficient_scope(scope, send, needed, missing, operation, self.prm_path)
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await send_error(
                    send,
                    413,
                    "request_entity_too_large",
                    f"the request body exceeds {self.max_body_bytes} bytes",
                )
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            request = read_request(body, header(scope, b"mcp-method"), header(scope, b"mcp-name"))
        except (HeaderMismatch, Ambiguous) as exc:
            code = HEADER_MISMATCH if isinstance(exc, HeaderMismatch) else INVALID_REQUEST
            await send_json(
                send,
                400,
                {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": str(exc)}},
            )
            return
        if request is not None and request.kind is not None:
            if not self.allowed(scope, request.kind, request.name):
                await send_json(send, 200, denied(request))
                return
            if await self._lacks_scopes(scope, send, request):
                return
        replay = _replay(body, receive)
        if request is not None and request.method in LISTS:
            send = _ListFilter(self, scope, request, send).send
        await self.app(scope, replay, send)


def _matches(scopes: CompiledScopes | None) -> list[CompiledExpression]:
    return [rule.match for rule in scopes.items] if scopes else []


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class _ListFilter:
    """Rewrites a list response: a JSON body as a whole, an SSE stream event by event."""

    def __init__(self, owner: McpAuthorization, scope: Scope, request: McpRequest, send: Send):
        self.owner = owner
        self.scope = scope
        self.method = request.method
        self.downstream = send
        self.start: Message | None = None
        self.sse = False
        self.pending = b""

    def _allowed(self, kind: str, name: str) -> bool:
        return self.owner.allowed(self.scope, kind, name)

    def _filtered(self, data: bytes) -> bytes:
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return data
        if isinstance(message, dict) and filter_result(message, self.method, self._allowed):
            return orjson.dumps(message)
        return data

    def _event(self, event: bytes) -> bytes:
        lines = event.split(b"\n")
        data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
        if not data:
            return event
        joined = b"\n".join(data)
        filtered = self._filtered(joined)
        if filtered is joined:
            return event  # nothing removed: the event passes byte for byte
        others = [line for line in lines if not line.startswith(b"data:")]
        return b"\n".join([*others, b"data: " + filtered])

    async def _send_events(self, more: bool) -> None:
        raw, held = self.pending, b""
        if more and raw.endswith(b"\r"):
            # It may be the first half of a CRLF: wait for the next chunk to tell.
            raw, held = raw[:-1], b"\r"
        # SSE lines end with CRLF, LF or a lone CR; all three must split events here exactly
        # as a client will, or an event could pass unread.
        text = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *events, rest = text.split(b"\n\n")
        out = b"".join(self._event(e) + b"\n\n" for e in events)
        self.pending = rest + held
        if not more:
            # An unterminated last event: clients should drop it, but a lenient one may not.
            out, self.pending = out + self._event(self.pending), b""
        await self.downstream({"type": "http.response.body", "body": out, "more_body": more})

    async def send(self, message: Message) -> None:
        """Send `message` downstream, with denied list items removed from bodies."""
        if message["type"] == "http.response.start":
            content_type = dict(message.get("headers", ())).get(b"content-type", b"")
            self.sse = content_type.startswith(b"text/event-stream")
            # The body's length changes when items are dropped.
            headers = [(k, v) for k, v in message.get("headers", ()) if k != b"content-length"]
            self.start = {**message, "headers": headers}
            if self.sse:
                await self.downstream(self.start)
            return
        if message["type"] != "http.response.body":
            await self.downstream(message)
            return
        more = message.get("more_body", False)
        self.pending += message.get("body", b"")
        if self.sse:
            await self._send_events(more)
            return
        if more:
            return
        body = self._filtered(self.pending) if self.pending else b""
        assert self.start is not None
        await self.downstream(
            {
                **self.start,
                "headers": [*self.start["headers"], (b"content-length", str(len(body)).encode())],
            }
        )
        await self.downstream({"type": "http.response.body", "body": body, "more_body": False})
