"""A federated route on the 2026-07-28 wire: no session, no `initialize`; every request carries
its version and the client's capabilities in `params._meta`, and its method and item in the
`Mcp-Method` / `Mcp-Name` headers. The gateway checks each request as a server must (`wire`),
then answers as one server: `server/discover` and the lists merged from every target's, a call
sent to its target under the target's own name (in the body and in `Mcp-Name`) and its answer
relayed with the target's HTTP status, a `subscriptions/listen` stream merged from each
target's own (`listen`). Each target is asked on the same wire, with the client's `_meta`.

A route offers this wire when all its targets do: a target that answers `server/discover` with
an error (a server of the session era) makes the gateway answer -32022 naming the session-era
versions, so a client falls back to `initialize` and reaches every target that way."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from ... import __version__, jsonrpc
from ...asgi import Receive, Scope, Send
from ...controlplane.snapshot import CompiledTarget
from ...jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_VERSION,
    Malformed,
)
from ...mcp_headers import encode_name
from ...mcp_methods import COMPLETION, DISCOVER, ITEMS, LISTEN, LISTS, NAMED_BY, SESSION_ONLY
from ..upstream import UpstreamResponse
from . import merge, replies, streams, wire
from .cursor import Cursors
from .fanout import Fanout
from .listen import listen
from .lists import merged_list
from .rewrite import call_answer, progress_token
from .routing import routed
from .session import ClientSession, Owner, TargetSession, owner_of
from .shared import SharedSessions
from .target import ErrorAnswer, Refused, TargetLink, Unavailable, unavailable
from .wire import WireError, WireRequest

# What this wire can ask of a federated route; anything else is unknown here (404).
_SERVED = frozenset({DISCOVER, LISTEN, COMPLETION, *ITEMS, *LISTS}) - SESSION_ONLY
# The wire's results say how long a client may keep them: what the gateway answers depends on
# who asks (denied items are filtered out) and on its targets' live state, so: not at all.
CACHEABLE: dict[str, object] = {"cacheScope": "private", "ttlMs": 0, "resultType": "complete"}


def wire_error(request_id: object, exc: WireError) -> dict[str, object]:
    """The JSON-RPC error of a request the wire's rules refused (with its data, if any)."""
    return jsonrpc.error(request_id, exc.code, str(exc), exc.data)


def caller_key(owner: Owner) -> str:
    """What binds a stateless caller's cursors to it, as a session id binds a session's: a
    digest of its issuer and subject (not a session id: those have no `:`)."""
    return "caller:" + hashlib.sha256(repr(owner).encode()).hexdigest()


def answered_with_error(failure: Unavailable) -> bool:
    """Whether a target answered (with a JSON-RPC error or an HTTP 4xx) rather than failed."""
    return isinstance(failure, (ErrorAnswer, Refused))


class Stateless:
    """Answers the requests of the 2026-07-28 wire on one federated route."""

    def __init__(
        self,
        targets: tuple[CompiledTarget, ...],
        link: TargetLink,
        fan: Fanout,
        cursors: Cursors,
        shared: SharedSessions | None,
        refused: Callable[[Scope, str], str],
    ):
        self.targets = targets
        self.names = frozenset(t.name for t in targets)
        self.link = link
        self.fan = fan
        self.cursors = cursors
        self.shared = shared
        self.refused = refused

    async def post(
        self, scope: Scope, message: dict[str, object], receive: Receive, send: Send
    ) -> None:
        """Answer one POSTed message."""
        request_id = message.get("id")
        if "method" not in message:
            why = self.refused(scope, "an answer on the stateless wire, which asks clients nothing")
            await replies.reply(send, 400, jsonrpc.error(None, INVALID_REQUEST, why))
            return
        if "id" not in message:
            await self._notification(scope, send)
            return
        try:
            request = wire.checked(scope["headers"], message)
            method = str(message["method"])
            if method not in _SERVED:
                raise WireError(METHOD_NOT_FOUND, f"Method not found: {method[:100]}")
            await self._request(scope, request, message, receive, send)
        except WireError as exc:
            self.refused(scope, f"refused on the 2026-07-28 wire: {exc}")
            await replies.reply(send, exc.status, wire_error(request_id, exc))
        except Malformed as exc:
            self.refused(scope, str(exc))
            status = wire.STATUS_OF.get(exc.code, 200)
            await replies.reply(send, status, jsonrpc.error(request_id, exc.code, str(exc)))

    async def _notification(self, scope: Scope, send: Send) -> None:
        """202, as a server of this wire answers the notifications clients still post: the
        wire defines none a server acts on (a client cancels by closing its stream)."""
        version = wire.header(scope["headers"], wire.VERSION)
        if version not in wire.STATELESS_VERSIONS:
            exc = WireError(
                UNSUPPORTED_VERSION,
                "Unsupported protocol version",
                {"supported": list(wire.STATELESS_VERSIONS), "requested": version},
            )
            await replies.reply(send, exc.status, wire_error(None, exc))
            return
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def _session(self, scope: Scope, request: WireRequest, method: str) -> ClientSession:
        """This request's view of the targets: each spoken to on the wire, none opened."""
        routing = ((wire.METHOD, method.encode()),)
        owner = owner_of(scope)
        return ClientSession(
            id=caller_key(owner),
            owner=owner,
            params={},
            targets={
                t.name: TargetSession(t, version=request.version, wire=routing)
                for t in self.targets
            },
            version=request.version,
        )

    async def _request(
        self,
        scope: Scope,
        request: WireRequest,
        message: dict[str, object],
        receive: Receive,
        send: Send,
    ) -> None:
        method = str(message["method"])
        session = self._session(scope, request, method)
        request_id = message["id"]
        if method == DISCOVER:
            await self._discover(scope, session, message, send)
        elif method in LISTS:
            if self.shared is not None:
                await self.shared.share_key(self.cursors)
            result = await merged_list(self.fan, self.cursors, self.names, scope, session, message)
            await replies.reply(send, 200, jsonrpc.result(request_id, {**result, **CACHEABLE}))
        elif method == LISTEN:
            await listen(self.fan, scope, session, message, receive, send)
        else:
            await self._call(scope, session, message, receive, send)

    async def _discover(
        self, scope: Scope, session: ClientSession, message: dict[str, object], send: Send
    ) -> None:
        answers: dict[str, dict[str, object]] = {}

        async def ask(target: TargetSession) -> None:
            answer = await self.fan.ask(scope, session, target, message)
            result = answer.get("result")
            if not isinstance(result, dict):
                raise ErrorAnswer(f"it answered server/discover with {answer.get('error')}")
            answers[target.target.name] = result

        failures = await self.fan.each(session, ask)
        request_id = message["id"]
        if any(answered_with_error(f) for f in failures.values()):
            # A target of the session era: every target speaks that one.
            names = ", ".join(n for n, f in failures.items() if answered_with_error(f))
            why = f"the MCP servers {names} behind this route do not speak this wire"
            self.refused(scope, why)
            supported = sorted(wire.SESSION_VERSIONS)
            data = {"supported": supported, "requested": session.version}
            exc = WireError(UNSUPPORTED_VERSION, f"Unsupported protocol version: {why}", data)
            await replies.reply(send, exc.status, wire_error(request_id, exc))
            return
        if not answers:
            why = "; ".join(f"{name}: {exc}" for name, exc in failures.items())
            text = self.refused(
                scope, f"none of the MCP servers behind this route answered ({why})"
            )
            await replies.reply(send, 200, jsonrpc.error(request_id, INTERNAL_ERROR, text))
            return
        await replies.reply(send, 200, jsonrpc.result(request_id, discovered(answers)))

    async def _call(
        self,
        scope: Scope,
        session: ClientSession,
        message: dict[str, object],
        receive: Receive,
        send: Send,
    ) -> None:
        name, rewritten = routed(message, self.names)
        target = session.targets[name]
        field = NAMED_BY.get(str(message["method"]))
        params = rewritten.get("params")
        if field is not None and isinstance(params, dict) and isinstance(params.get(field), str):
            # The target checks Mcp-Name against its own name for the item.
            own = encode_name(params[field])
            target.wire = (*(target.wire or ()), (wire.NAME, own))
        call = (str(message["method"]), message["id"], progress_token(message))
        request_id = call[1]
        try:
            response = await self.link.send(scope, target, jsonrpc.write_message(rewritten))
            self.fan.health.ok(name)
            await self._relay(scope, response, session, name, call, receive, send)
        except Unavailable as exc:
            self.fan.health.failed(name, exc)
            text = self.refused(scope, unavailable(name, exc))
            await replies.reply(send, 200, jsonrpc.error(request_id, INTERNAL_ERROR, text))

    async def _relay(
        self,
        scope: Scope,
        response: UpstreamResponse,
        session: ClientSession,
        name: str,
        call: tuple[str, object, object],
        receive: Receive,
        send: Send,
    ) -> None:
        """The target's answer to `call` (method, id, progress token), rewritten for the
        client, with its HTTP status."""
        method, request_id, _ = call
        try:
            if streams.is_stream(response):
                relay = streams.relay_call(response, send, name, call, session.exchanges)
                await streams.while_connected(relay, receive)
                return
            answer = await self.link.answer(session.targets[name], response, request_id)
        finally:
            response.release()
        out = call_answer(answer, name, session.exchanges, method, request_id)
        if out is None:
            why = f"the MCP server {name!r} did not answer the request (it sent another message)"
            failed = jsonrpc.error(request_id, INTERNAL_ERROR, self.refused(scope, why))
            await replies.reply(send, 200, failed)
            return
        await replies.reply(send, response.status, out)


def discovered(answers: dict[str, dict[str, object]]) -> dict[str, object]:
    """One `server/discover` result from the targets': the versions all of them support, the
    union of their capabilities, their instructions each under its target's name."""
    lists = [a.get("supportedVersions") for a in answers.values()]
    shared = [
        v
        for v in wire.STATELESS_VERSIONS
        if all(isinstance(held, list) and v in held for held in lists)
    ]
    capabilities = merge.union(
        [c for a in answers.values() if isinstance(c := a.get("capabilities"), dict)]
    )
    result: dict[str, object] = {
        "supportedVersions": shared or list(wire.STATELESS_VERSIONS),
        "capabilities": capabilities,
        **CACHEABLE,
        "_meta": {wire.META_SERVER_INFO: {"name": "mcp-oauth-gateway", "version": __version__}},
    }
    texts = {n: t for n, a in answers.items() if isinstance(t := a.get("instructions"), str)}
    instructions = merge.instructions(texts)
    if instructions is not None:
        result["instructions"] = instructions
    return result
