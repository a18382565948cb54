"""The answering stage of a route whose GatewayBackend has several targets: the gateway is the
MCP server its client talks to (Streamable HTTP, POST and DELETE), and each target's client.

`initialize` opens a session with every target at once, in parallel, each within the route's
timeout; the client gets one session id, minted here, and one answer (`merge`). Lists are asked
of every target in parallel and merged; a target that fails is left out of that answer and asked
again next time (its session opened again if it lost it). A call goes to its target only, and the
target's answer (JSON, or an event stream with progress notifications) is streamed back as it
comes; a target that fails answers a JSON-RPC error (HTTP 200), so the client's session lives on.

Not yet (see docs/configuration/federation.md): the client's GET stream (server-to-client
requests and notifications), cancellation routed by request id, sessions kept across replicas."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ... import __version__
from ...asgi import Receive, Scope, Send, send_error
from ...controlplane.snapshot import CompiledTarget
from ..upstream import UpstreamError, UpstreamResponse
from . import jsonrpc, merge
from .cursor import BadCursor, Cursors
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, Malformed
from .routing import COMPLETION, ROUTED, routed
from .session import ClientSession, SessionTable, TargetSession, new_session, owner_of
from .target import INITIALIZED, SessionGone, TargetLink, Unavailable

log = logging.getLogger("mcp_oauth_gateway.federation")
T = TypeVar("T")
_SESSION_HEADER = b"mcp-session-id"


@dataclass(frozen=True)
class FederationState:
    """What a federated route keeps across configuration reloads while its targets stay the
    same: its clients' sessions, and the key its cursors are signed with."""

    sessions: SessionTable = field(default_factory=SessionTable)
    cursors: Cursors = field(default_factory=Cursors)


class Federation:
    """Serves a backend's targets as one MCP server."""

    def __init__(
        self,
        targets: tuple[CompiledTarget, ...],
        link: TargetLink,
        max_body: int,
        state: FederationState | None = None,
    ):
        self.targets = targets
        self.names = frozenset(t.name for t in targets)
        self.link = link
        self.max_body = max_body
        state = state if state is not None else FederationState()
        self.sessions = state.sessions
        self.cursors = state.cursors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        if method == "POST":
            body = await self._body(receive, send)
            if body is not None:
                await self._post(scope, body, receive, send)
        elif method == "DELETE":
            await self._delete(scope, send)
        else:
            # MCP's answer for "no server-to-client stream here": the GET stream comes later.
            why = "a federated route answers POST and DELETE; it offers no GET stream yet"
            await send_error(send, 405, "method_not_allowed", why, [(b"allow", b"POST, DELETE")])

    async def _body(self, receive: Receive, send: Send) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                why = f"the request body exceeds {self.max_body} bytes"
                await send_error(send, 413, "request_entity_too_large", why)
                return None
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _post(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        try:
            message = jsonrpc.read(body)
        except Malformed as exc:
            await jsonrpc.reply(send, 400, jsonrpc.error(None, exc.code, str(exc)))
            return
        if message.get("method") == "initialize":
            try:
                await self._initialize(scope, message, send)
            except Malformed as exc:
                await jsonrpc.reply(send, 200, jsonrpc.error(message.get("id"), exc.code, str(exc)))
            return
        session = await self._session(scope, send)
        if session is None:
            return
        if "method" not in message or "id" not in message:
            # A notification goes to every target; a client's answer to a server's request
            # has no request to go with until the GET stream exists.
            if "method" in message:
                await self._notify(scope, session, message)
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        try:
            await self._request(scope, session, message, receive, send)
        except Malformed as exc:
            await jsonrpc.reply(send, 200, jsonrpc.error(message["id"], exc.code, str(exc)))

    async def _session(self, scope: Scope, send: Send) -> ClientSession | None:
        value = dict(scope["headers"]).get(_SESSION_HEADER)
        if value is None:
            why = "Mcp-Session-Id is required: send initialize first"
            await jsonrpc.reply(send, 400, jsonrpc.error(None, jsonrpc.INVALID_REQUEST, why))
            return None
        session = self.sessions.find(value.decode("latin-1"), owner_of(scope))
        if session is None:
            why = "the session is not known here (it ended): send initialize again"
            await jsonrpc.reply(send, 404, jsonrpc.error(None, jsonrpc.INVALID_REQUEST, why))
        return session

    async def _request(
        self,
        scope: Scope,
        session: ClientSession,
        message: dict[str, object],
        receive: Receive,
        send: Send,
    ) -> None:
        method = str(message["method"])
        request_id = message["id"]
        if method == "ping":
            await jsonrpc.reply(send, 200, jsonrpc.result(request_id, {}))
        elif method in merge.LISTS:
            result = await self._list(scope, session, method, message)
            await jsonrpc.reply(send, 200, jsonrpc.result(request_id, result))
        elif method in ROUTED or method == COMPLETION:
            await self._call(scope, session, message, receive, send)
        elif method == "logging/setLevel":
            await self._each(scope, session, lambda t: self._ask(scope, session, t, message))
            await jsonrpc.reply(send, 200, jsonrpc.result(request_id, {}))
        else:
            raise Malformed(METHOD_NOT_FOUND, f"Method not found: {method[:100]}")

    async def _initialize(self, scope: Scope, message: dict[str, object], send: Send) -> None:
        request_id = message.get("id")
        params = merge.for_targets(jsonrpc.params_of(message))
        session = new_session(owner_of(scope), params, self.targets)
        failures = await self._each(
            scope, session, lambda t: self.link.open(scope, t, params, notify=False), every=True
        )
        opened = list(session.open_targets())
        if not opened:
            why = "; ".join(f"{name}: {exc}" for name, exc in failures.items())
            text = f"none of the MCP servers behind this route answered initialize ({why})"
            await jsonrpc.reply(send, 200, jsonrpc.error(request_id, INTERNAL_ERROR, text))
            return
        session.version = merge.agreed_version([t.version for t in opened if t.version])
        result: dict[str, object] = {
            "protocolVersion": session.version,
            "capabilities": merge.union([t.capabilities for t in opened]),
            "serverInfo": {"name": "mcp-oauth-gateway", "version": __version__},
        }
        instructions = merge.instructions({t.target.name: t.instructions for t in opened})
        if instructions is not None:
            result["instructions"] = instructions
        # A session forgotten for this one is not ended at its targets: that would send this
        # caller's credentials on its behalf. The targets expire it as they expire idle ones.
        self.sessions.add(session)
        headers = [(_SESSION_HEADER, session.id.encode())]
        await jsonrpc.reply(send, 200, jsonrpc.result(request_id, result), headers)

    async def _each(
        self,
        scope: Scope,
        session: ClientSession,
        action: Callable[[TargetSession], Awaitable[object]],
        every: bool = False,
    ) -> dict[str, Unavailable]:
        """Run `action` on every target (`every`) or every open one, in parallel; what failed."""
        chosen = list(session.targets.values()) if every else list(session.open_targets())
        outcomes = await asyncio.gather(*(action(t) for t in chosen), return_exceptions=True)
        failures: dict[str, Unavailable] = {}
        for target, outcome in zip(chosen, outcomes, strict=True):
            if isinstance(outcome, Unavailable):
                log.info("federated target %s: %s", target.target.name, outcome)
                failures[target.target.name] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
        return failures

    async def _notify(
        self, scope: Scope, session: ClientSession, message: dict[str, object]
    ) -> None:
        if message.get("method") == INITIALIZED:
            session.initialized = True
        body = jsonrpc.dumps(message)
        await self._each(scope, session, lambda t: self.link.tell(scope, t, body))

    async def _reopened(
        self,
        scope: Scope,
        session: ClientSession,
        target: TargetSession,
        action: Callable[[], Awaitable[T]],
    ) -> T:
        """`action` on the target, its session opened first when it is not (or no longer) open."""
        for attempt in (1, 2):
            if not target.open:
                async with target.opening:
                    if not target.open:
                        await self.link.open(scope, target, session.params, session.initialized)
            try:
                return await action()
            except SessionGone:
                target.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _ask(
        self,
        scope: Scope,
        session: ClientSession,
        target: TargetSession,
        message: dict[str, object],
    ) -> dict[str, object]:
        body = jsonrpc.dumps(message)
        request_id = message.get("id")

        async def ask() -> dict[str, object]:
            return (await self.link.ask(scope, target, body, request_id))[0]

        return await self._reopened(scope, session, target, ask)

    async def _list(
        self, scope: Scope, session: ClientSession, method: str, message: dict[str, object]
    ) -> dict[str, object]:
        params = jsonrpc.params_of(message)
        if "cursor" in params:
            try:
                positions: dict[str, str | None] = dict(
                    self.cursors.read(params["cursor"], session.id, method, self.names)
                )
            except BadCursor as exc:
                raise Malformed(INVALID_PARAMS, str(exc)) from None
        else:
            positions = {name: None for name in session.targets}
        pages: dict[str, tuple[list[object], object]] = {}

        async def page(target: TargetSession) -> None:
            name = target.target.name
            own = {k: v for k, v in params.items() if k != "cursor"}
            if positions[name] is not None:
                own["cursor"] = positions[name]
            answer = await self._ask(scope, session, target, {**message, "params": own})
            result = answer.get("result")
            if not isinstance(result, dict):
                raise Unavailable(f"it answered {method} with an error: {answer.get('error')}")
            pages[name] = (merge.offered_items(method, name, result), result.get("nextCursor"))

        chosen = [session.targets[name] for name in positions]
        outcomes = await asyncio.gather(*(page(t) for t in chosen), return_exceptions=True)
        for target, outcome in zip(chosen, outcomes, strict=True):
            if isinstance(outcome, Unavailable):
                log.info(
                    "federated target %s left out of %s: %s", target.target.name, method, outcome
                )
            elif isinstance(outcome, BaseException):
                raise outcome
        field = merge.LISTS[method][0]
        result: dict[str, object] = {
            field: [item for name in positions if name in pages for item in pages[name][0]]
        }
        following = {n: c for n, (_, c) in pages.items() if isinstance(c, str) and c}
        cursor = self.cursors.issue(session.id, method, following)
        if cursor is not None:
            result["nextCursor"] = cursor
        return result

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
        body = jsonrpc.dumps(rewritten)

        async def forward() -> UpstreamResponse:
            return await self.link.send(scope, target, body)

        try:
            response = await self._reopened(scope, session, target, forward)
        except Unavailable as exc:
            text = f"the MCP server {name!r} behind this route is unavailable: {exc}"
            await jsonrpc.reply(send, 200, jsonrpc.error(message["id"], INTERNAL_ERROR, text))
            return
        # A call's stream may run long: when the client goes away, stop reading the target.
        relay = asyncio.ensure_future(_relay(response, send))
        watcher = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await asyncio.wait({relay, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (relay, watcher):
                task.cancel()
            await asyncio.gather(relay, watcher, return_exceptions=True)
            response.release()

    async def _delete(self, scope: Scope, send: Send) -> None:
        session = await self._session(scope, send)
        if session is None:
            return
        self.sessions.remove(session.id)
        await self._close(scope, session)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def _close(self, scope: Scope, session: ClientSession) -> None:
        """End every target's session (a target that fails is left to expire it; one that
        keeps no sessions has nothing to end)."""

        async def end(target: TargetSession) -> None:
            if target.session_id is not None:
                await self.link.tell(scope, target, b"")

        await self._each(scope, session, end)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _relay(response: UpstreamResponse, send: Send) -> None:
    """The target's answer to a call, streamed back as it comes (JSON or an event stream)."""
    content_type = next(
        (v for k, v in response.headers if k.lower() == b"content-type"), b"application/json"
    )
    head = [(b"content-type", content_type)]
    await send({"type": "http.response.start", "status": response.status, "headers": head})
    complete = response.complete_body()
    if complete is not None:
        await send({"type": "http.response.body", "body": complete, "more_body": False})
        return
    try:
        async for chunk in response.chunks():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except UpstreamError as exc:
        log.warning("federated answer broke off: %s", exc)
    await send({"type": "http.response.body", "body": b"", "more_body": False})
