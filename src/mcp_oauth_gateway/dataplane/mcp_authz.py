"""MCP tool-level authorization (`spec.backend.mcp.authorization`): rules evaluated per item.

Calls to a denied tool, prompt or resource are answered here and never reach the backend;
answers that may hold list results (JSON or SSE) lose the items the caller may not use, and the
streams that carry resource updates (GET, a listen) lose those of resources it may not read.

Nothing reaches the backend unjudged: a POST body is read strictly (decoded first when it is
gzip or deflate) and refused with a JSON-RPC error when it cannot be read exactly; the backend
receives the very bytes that were judged. Other methods may not carry a body at all."""

from __future__ import annotations

from collections.abc import Callable

from werkzeug.http import parse_options_header

from .. import audit
from ..asgi import (
    CLAIMS_KEY,
    DEFAULT_TOKEN_CACHE_ENTRIES,
    TOKEN_KEY,
    ASGIApp,
    BodyTooLarge,
    Headers,
    Receive,
    Scope,
    Send,
    read_body,
    replay,
    send_json,
    send_too_large,
)
from ..controlplane.cel import CompiledExpression, outcome
from ..controlplane.snapshot import CompiledAuthorization, CompiledScopes
from ..jsonrpc import INVALID_REQUEST, PARSE_ERROR, error
from ..mcp_methods import LISTEN, LISTS
from .authz import decide, explain, explain_allow, request_variables
from .bounded import BoundedCache, CacheCounts
from .content_coding import SUPPORTED, CodingError, check_codings, codings, decode
from .mcp_list_filter import ListFilter
from .mcp_messages import McpRequest, Refusal, Unreadable, denied, item_variables, read_request
from .scopes import granted_scopes, lacking, send_insufficient_scope

STAGE = "mcp-authorization"


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
        targets: tuple[str, ...] = (),
        cache_entries: int = DEFAULT_TOKEN_CACHE_ENTRIES,
        counts: CacheCounts | None = None,
    ):
        self.app = app
        self.targets = targets  # the backend's target names, for `mcp.target`
        self.rules = rules
        self.scopes = scopes
        self.prm_path = prm_path
        self.max_body_bytes = max_body_bytes
        expressions = [*(rules.expressions if rules else ()), *_matches(scopes)]
        self.needs_request = any(e.uses_request for e in expressions)
        # Rules over the token and the item alone answer the same for the token's whole life,
        # so a session's lists and calls evaluate each item once.
        self._decisions: BoundedCache[tuple[str, str, str], bool] | None = (
            None if self.needs_request else BoundedCache(cache_entries, counts)
        )
        # The scopes an item needs and, for the audit trail, the rule that let it through: the
        # same for the token's life too. Under the process-wide budget, least recently used
        # forgotten first, as the decisions (counted there: entries and evictions).
        self._needed_cache: BoundedCache[tuple[str, str, str], tuple[str, ...]] = BoundedCache(
            cache_entries, counts
        )
        self._allowed_by: BoundedCache[tuple[str, str, str], str] = BoundedCache(
            cache_entries, counts
        )

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
                cache.counts.misses += 1
                hit = self._decide(scope, kind, name)
                cache.put(key, hit)
            else:
                cache.counts.hits += 1
            return hit
        return self._decide(scope, kind, name)

    def _activation(self, scope: Scope, kind: str, name: str) -> dict[str, object]:
        activation: dict[str, object] = {
            "jwt": scope.get(CLAIMS_KEY, {}),
            "mcp": item_variables(kind, name, self.targets),
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
            self._needed_cache.put(key, hit)
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
        await send_insufficient_scope(scope, send, needed, missing, operation, self.prm_path, STAGE)
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        if method != "POST":
            first = await receive()
            if first["type"] != "http.request":
                return  # the client went away
            if first.get("body") or first.get("more_body", False):
                # MCP sends bodies only with POST; a backend might still read one as a message.
                why = f"a {method} request carries a body, which is not read here; MCP sends "
                await _refuse(scope, send, INVALID_REQUEST, why + "messages only with POST")
                return
            receive = replay(b"", receive)
            if method == "GET":
                # A resumed stream (Last-Event-ID) may replay any earlier answer, lists too;
                # and the stream carries the updates of subscribed resources.
                _ask_for_identity(scope)
                send = ListFilter(self._allower(scope), None, None, send).send
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge as exc:
            audit.deny(scope, STAGE, str(exc))
            await send_too_large(send, exc)
            return
        if body is None:
            return  # the client went away
        # One dict built in C: the entry check refused repeats of these headers, so its (last)
        # values are the only ones.
        values = dict(scope["headers"])
        try:
            body = _decoded(scope, values, body, self.max_body_bytes)
            request = read_request(body, values.get(b"mcp-method"), values.get(b"mcp-name"))
        except CodingError as exc:
            headers = [(b"accept-encoding", SUPPORTED.encode())]
            await _refuse(scope, send, PARSE_ERROR, str(exc), headers)
            return
        except Refusal as exc:
            await _refuse(scope, send, exc.code, str(exc))
            return
        audited = request is not None and audit.enabled(scope)
        if audited and request is not None:
            self._audit_request(scope, request)
        if request is not None and not await self._may_use(scope, send, request, audited):
            return
        replayed = replay(body, receive)
        if request is not None and (request.method in LISTS or request.method == LISTEN):
            # A list's items, and a listen stream's updates, are judged one by one.
            _ask_for_identity(scope)
            send = ListFilter(self._allower(scope), request.method, request.id, send).send
        await self.app(scope, replayed, send)

    async def _may_use(self, scope: Scope, send: Send, request: McpRequest, audited: bool) -> bool:
        """Whether the caller may use every item the request names (its own, and each resource
        a listen stream would deliver updates of); False once the refusal was answered."""
        # The usual request names one item: judged as it is, nothing built for it.
        items = [request] if request.kind is not None else []
        items += [McpRequest(request.id, request.method, "resource", u) for u in request.subscribed]
        for item in items:
            kind, name = item.kind, item.name
            assert kind is not None
            if not self.allowed(scope, kind, name):
                if audited:
                    audit.deny(scope, STAGE, self._why_denied(scope, kind, name))
                await send_json(send, 200, denied(item))
                return False
            if await self._lacks_scopes(scope, send, item):
                return False
            if audited and self.rules is not None and name is not None:
                audit.note(scope, self._why_allowed(scope, kind, name))
        return True

    def _audit_request(self, scope: Scope, request: McpRequest) -> None:
        """The MCP call in the audit record, with its target on a federated backend."""
        target = None
        if len(self.targets) > 1 and request.kind is not None and request.name is not None:
            found = item_variables(request.kind, request.name, self.targets).get("target")
            target = found if isinstance(found, str) else None
        audit.mcp_request(scope, request.method, request.kind, request.name, target)

    def _why_allowed(self, scope: Scope, kind: str, name: str) -> str:
        """Which tool rule let the item through, in words (remembered per token and item when
        the rules do not read the request, as the decision is)."""
        token = scope.get(TOKEN_KEY)
        key = (token, kind, name) if token is not None and not self.needs_request else None
        why = self._allowed_by.get(key) if key is not None else None
        if why is None:
            assert self.rules is not None
            activation = self._activation(scope, kind, name)
            why = f"{kind} {name[:200]!r}: " + explain_allow(self.rules, activation)
            if key is not None:
                self._allowed_by.put(key, why)
        return why

    def _why_denied(self, scope: Scope, kind: str, name: str | None) -> str:
        """Which rule refused the item, in words (the refusal path only)."""
        if name is None:
            return f"the {kind} is not named"
        if "\x00" in name or self.rules is None:
            return f"the {kind} name contains a NUL character"
        return f"{kind} {name[:200]!r}: " + explain(self.rules, self._activation(scope, kind, name))

    def _allower(self, scope: Scope) -> Callable[[str, str], bool]:
        return lambda kind, name: self.allowed(scope, kind, name)


def _decoded(scope: Scope, values: dict[bytes, bytes], body: bytes, limit: int) -> bytes:
    """The body as the backend will receive it: decoded when coded (and its headers made to
    say so); a CodingError or Unreadable when it cannot be read as UTF-8 JSON."""
    content_type = values.get(b"content-type")
    if content_type is not None and b"charset" in content_type.lower():
        charset = parse_options_header(content_type.decode("latin-1"))[1].get("charset")
        if charset is not None and charset.lower() not in ("utf-8", "utf8"):
            raise Unreadable(f"the body is declared {charset[:40]!r}; send UTF-8 JSON")
    if b"content-encoding" not in values:
        return body
    headers: Headers = scope["headers"]
    coding = check_codings(codings(headers))
    if coding is None:
        return body
    decoded = decode(coding, body, limit)
    scope["headers"] = [
        *(h for h in headers if h[0] not in (b"content-encoding", b"content-length")),
        (b"content-length", str(len(decoded)).encode()),
    ]
    return decoded


def _ask_for_identity(scope: Scope) -> None:
    # The answer is filtered here: ask for it uncompressed (an absent Accept-Encoding would
    # allow any coding). One that comes compressed anyway is decoded by the filter.
    kept = [h for h in scope["headers"] if h[0] != b"accept-encoding"]
    scope["headers"] = [*kept, (b"accept-encoding", b"identity")]


async def _refuse(
    scope: Scope, send: Send, code: int, why: str, headers: Headers | None = None
) -> None:
    audit.deny(scope, STAGE, f"unreadable MCP request: {why}")
    await send_json(send, 400, error(None, code, why), headers)


def _matches(scopes: CompiledScopes | None) -> list[CompiledExpression]:
    return [rule.match for rule in scopes.items] if scopes else []
