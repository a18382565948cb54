"""The answering stage of a route whose GatewayBackend has several targets: the gateway is the
MCP server its client talks to (Streamable HTTP: POST, GET and DELETE), and each target's client.

`initialize` opens a session with every target at once, in parallel, each within its timeout
(its own, else the route's); the client gets one session id, minted here, and one answer
(`merge`). Lists are asked of every target in parallel and merged; a target that fails is left
out of that answer and asked again next time (its session opened again if it lost it). A call
goes to its target only, and the target's answer (JSON, or an event stream with progress
notifications) is streamed back as it comes, rewritten for the client (`streams`); a target that
fails answers a JSON-RPC error (HTTP 200), so the client's session lives on. The client's GET
stream merges its targets' own, under event ids of the gateway's from which the client resumes
it (`get_stream`, `backlog`). A target's request reaches the client under an id the session
minted and the client's answer goes back to that target only (`exchange`); a cancellation goes
to the targets that have the request.

With a Redis URL (the Broker's), sessions are kept there too and served by any replica
(`shared`): their streams' events, the targets' requests to the client and the client's
requests in flight, the session limits and the targets' health too. Redis not answering when a
session is opened: 503 with `Retry-After` (its limits cannot be counted). The 2026-07-28 wire,
which has no sessions, is answered by `stateless`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TypeVar

from ... import __version__, audit, jsonrpc
from ...asgi import BodyTooLarge, Receive, Scope, Send, read_body, send_error, send_too_large
from ...controlplane.snapshot import CompiledTarget
from ...jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, Malformed
from ...mcp_methods import (
    CANCELLED,
    COMPLETION,
    INITIALIZE,
    INITIALIZED,
    ITEMS,
    LISTS,
    PING,
    SET_LOG_LEVEL,
)
from ...redis_clients import RedisUnavailable
from ..upstream import UpstreamResponse
from . import get_stream, merge, replies, rewrite, streams, wire
from .backlog import Backlog, MemoryBacklog
from .cursor import Cursors
from .directory import Directory
from .fanout import Fanout
from .health import Health
from .lists import merged_list
from .routing import relayed_notification, routed
from .session import ClientSession, SessionTable, new_session, owner_of
from .shared import SharedSessions
from .stateless import Stateless
from .target import TargetLink, Unavailable, refusal_status, unavailable

log = logging.getLogger("mcp_oauth_gateway.federation")
T = TypeVar("T")
_SESSION_HEADER = b"mcp-session-id"
_ALLOW = b"POST, GET, DELETE"
# The stage's name in the audit trail (serving.stages.PIPELINE).
STAGE = "federation"


def refused(scope: Scope, why: str) -> str:
    """`why`, recorded as the federation stage's refusal of the request."""
    audit.deny(scope, STAGE, why)
    return why


@dataclass(frozen=True)
class FederationState:
    """What a federated route keeps across configuration reloads while its targets stay the
    same: its clients' sessions, the key its cursors are signed with, its targets' health, and
    where its sessions are shared with other replicas (Redis), if anywhere."""

    sessions: SessionTable = field(default_factory=SessionTable)
    cursors: Cursors = field(default_factory=Cursors)
    health: Health = field(default_factory=Health)
    shared: SharedSessions | None = None


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
        # Each target's own timeout, read from the running configuration (a session made
        # before a reload holds the targets it was made with).
        link.timeouts = {t.name: t.timeout for t in targets if t.timeout is not None}
        self.max_body = max_body
        state = state if state is not None else FederationState()
        self.sessions = state.sessions
        self.cursors = state.cursors
        self.health = state.health
        self.shared = state.shared
        self.directory = Directory(state.sessions, state.shared, targets)
        if state.shared is not None:
            state.health.share(state.shared)
        self.fan = Fanout(link, state.health)
        backlog: Backlog = state.shared if state.shared is not None else MemoryBacklog()
        self.listener = get_stream.Listener(self.fan, self.directory, backlog, refused)
        self.stateless = Stateless(targets, link, self.fan, self.cursors, self.shared, refused)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        if method != "POST" and wire.is_stateless(scope["headers"]):
            why = "the 2026-07-28 wire has no GET stream and no session to end: POST only"
            await send_error(send, 405, "method_not_allowed", why, [(b"allow", b"POST")])
        elif method == "POST":
            try:
                body = await read_body(receive, self.max_body)
            except BodyTooLarge as exc:
                refused(scope, str(exc))
                await send_too_large(send, exc)
                return
            if body is not None:
                await self._post(scope, body, receive, send)
        elif method == "DELETE":
            await self._delete(scope, send)
        elif method == "GET":
            await self._get(scope, receive, send)
        else:
            why = "a federated route answers POST, GET and DELETE"
            await send_error(send, 405, "method_not_allowed", why, [(b"allow", _ALLOW)])

    async def _post(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        try:
            message = jsonrpc.read_request(body)
        except Malformed as exc:
            why = refused(scope, f"unreadable JSON-RPC message: {exc}")
            await replies.reply(send, 400, jsonrpc.error(None, exc.code, why))
            return
        if wire.is_stateless(scope["headers"]):
            await self.stateless.post(scope, message, receive, send)
            return
        if message.get("method") == INITIALIZE:
            try:
                await self._initialize(scope, message, send)
            except Malformed as exc:
                refused(scope, f"initialize refused: {exc}")
                await replies.reply(send, 200, jsonrpc.error(message.get("id"), exc.code, str(exc)))
            return
        session = await self._session(scope, send)
        if session is None:
            return
        try:
            await self._message(scope, session, message, receive, send)
        finally:
            await self.directory.store(session)

    async def _message(
        self,
        scope: Scope,
        session: ClientSession,
        message: dict[str, object],
        receive: Receive,
        send: Send,
    ) -> None:
        if "method" not in message:
            await self._answered(scope, session, message, send)
        elif "id" not in message:
            if not relayed_notification(str(message["method"])):
                # A request without an id (JSON-RPC runs it, unanswered) would be sent to
                # every target as it is, never renamed for one: the item authorization
                # judged for one target would reach the others under its offered name.
                why = refused(scope, f"{str(message['method'])[:100]!r} is not a notification")
                await replies.reply(send, 400, jsonrpc.error(None, INVALID_REQUEST, why))
                return
            await self._notify(scope, session, message)
            # Stored before the answer: the client's next request may land at another replica.
            await self.directory.store(session)
            await _accepted(send)
        else:
            try:
                await self._request(scope, session, message, receive, send)
            except Malformed as exc:
                refused(scope, str(exc))
                await replies.reply(send, 200, jsonrpc.error(message["id"], exc.code, str(exc)))

    async def _session(self, scope: Scope, send: Send) -> ClientSession | None:
        value = dict(scope["headers"]).get(_SESSION_HEADER)
        if value is None:
            why = "Mcp-Session-Id is required: send initialize first"
            refused(scope, "no Mcp-Session-Id (initialize was not sent first)")
            await replies.reply(send, 400, jsonrpc.error(None, INVALID_REQUEST, why))
            return None
        session = await self.directory.find(value.decode("latin-1"), owner_of(scope))
        if session is None:
            why = "the session is not known here (it ended): send initialize again"
            refused(scope, "unknown session: ended, forgotten, or another caller's")
            await replies.reply(send, 404, jsonrpc.error(None, INVALID_REQUEST, why))
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
        if method == PING:
            await replies.reply(send, 200, jsonrpc.result(request_id, {}))
        elif method in ITEMS or method == COMPLETION:
            await self._call(scope, session, message, receive, send)
        elif method in LISTS or method == SET_LOG_LEVEL:
            # Kept while it runs: a cancellation of it goes to every target asked.
            session.exchanges.start(request_id, session.targets, rewrite.progress_token(message))
            await session.exchanges.settle()
            try:
                if method in LISTS:
                    if self.shared is not None:
                        await self.shared.share_key(self.cursors)
                    result = await merged_list(
                        self.fan, self.cursors, self.names, scope, session, message
                    )
                else:
                    await self.fan.each(session, lambda t: self.fan.ask(scope, session, t, message))
                    result = {}
            finally:
                session.exchanges.finish(request_id)
                await session.exchanges.settle()
            await replies.reply(send, 200, jsonrpc.result(request_id, result))
        else:
            raise Malformed(METHOD_NOT_FOUND, f"Method not found: {method[:100]}")

    async def _initialize(self, scope: Scope, message: dict[str, object], send: Send) -> None:
        request_id = message.get("id")
        params = jsonrpc.params_of(message)
        session = new_session(owner_of(scope), params, self.targets)
        failures = await self.fan.each(
            session, lambda t: self.link.open(scope, t, params, notify=False), every=True
        )
        opened = list(session.open_targets())
        if not opened:
            why = "; ".join(f"{name}: {exc}" for name, exc in failures.items())
            text = f"none of the MCP servers behind this route answered initialize ({why})"
            refused(scope, text)
            # Every target refused the request itself (its Origin, say): the client hears
            # that refusal, as through a single-target route, not a server error.
            status = refusal_status(failures.values())
            code = INVALID_REQUEST if status != 200 else INTERNAL_ERROR
            await replies.reply(send, status, jsonrpc.error(request_id, code, text))
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
        try:
            await self.directory.add(session)
        except RedisUnavailable as exc:
            log.warning("federated session refused: its limits could not be counted: %s", exc)
            why = refused(scope, "the session store (Redis) did not answer: try again shortly")
            retry = [(b"retry-after", str(exc.retry_after).encode())]
            await send_error(send, 503, "temporarily_unavailable", why, retry)
            return
        headers = [(_SESSION_HEADER, session.id.encode())]
        await replies.reply(send, 200, jsonrpc.result(request_id, result), headers)

    async def _notify(
        self, scope: Scope, session: ClientSession, message: dict[str, object]
    ) -> None:
        method = message.get("method")
        if method == INITIALIZED:
            session.initialized = True
        only = None
        if method == CANCELLED:
            # Only the targets the request went to; none once it was answered.
            params = message.get("params")
            cancelled = params.get("requestId") if isinstance(params, dict) else None
            only = await session.exchanges.cancelled(cancelled)
            if not only:
                return
        body = jsonrpc.write_message(message)
        await self.fan.each(session, lambda t: self.link.tell(scope, t, body), only=only)

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
        body = jsonrpc.write_message(rewritten)
        method, request_id = str(message["method"]), message["id"]

        async def forward() -> UpstreamResponse:
            return await self.link.send(scope, target, body)

        session.exchanges.start(request_id, (name,), rewrite.progress_token(message))
        try:
            # Known to every replica before the target has it: the client may cancel it anywhere.
            await session.exchanges.settle()
            response = await self.fan.reopened(scope, session, target, forward)
            self.health.ok(name)
            try:
                if streams.is_stream(response):
                    call = (method, request_id, rewrite.progress_token(message))
                    relay = streams.relay_call(response, send, name, call, session.exchanges)
                    await streams.while_connected(relay, receive)
                    return
                answer = await self.link.answer(target, response, request_id)
            finally:
                response.release()
        except Unavailable as exc:
            self.health.failed(name, exc)
            text = refused(scope, unavailable(name, exc))
            await replies.reply(send, 200, jsonrpc.error(request_id, INTERNAL_ERROR, text))
            return
        finally:
            session.exchanges.finish(request_id)
            await session.exchanges.settle()
        out = rewrite.call_answer(answer, name, session.exchanges, method, request_id)
        if out is None:
            why = f"the MCP server {name!r} did not answer the request (it sent another message)"
            out = jsonrpc.error(request_id, INTERNAL_ERROR, refused(scope, why))
        await replies.reply(send, 200, out)

    async def _answered(
        self, scope: Scope, session: ClientSession, message: dict[str, object], send: Send
    ) -> None:
        """The client's answer to a target's request, sent to that target under its own id."""
        routed_to = None
        if rewrite.is_answer_of_client(message):
            asked = await session.exchanges.take(message.get("id"))
            routed_to = rewrite.answered(message, asked)
        if routed_to is None:
            shown = audit.capped(message.get("id"), 100)
            why = f"an answer to a request this session never sent the client (id {shown})"
            refused(scope, why)
            await replies.reply(send, 400, jsonrpc.error(None, INVALID_REQUEST, why))
            return
        name, answer = routed_to
        try:
            await self.link.tell(scope, session.targets[name], jsonrpc.write_message(answer))
        except Unavailable as exc:
            self.health.failed(name, exc)
            text = refused(scope, unavailable(name, exc))
            await replies.reply(send, 502, jsonrpc.error(None, INTERNAL_ERROR, text))
            return
        self.health.ok(name)
        await _accepted(send)

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The client's GET stream (`get_stream`)."""
        session = await self._session(scope, send)
        if session is not None:
            await self.listener.get(scope, session, receive, send)

    async def _delete(self, scope: Scope, send: Send) -> None:
        session = await self._session(scope, send)
        if session is None:
            return
        await self.directory.remove(session.id, session.owner)
        await self.fan.end(scope, session)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def _accepted(send: Send) -> None:
    """202: a notification or an answer taken on."""
    await send({"type": "http.response.start", "status": 202, "headers": []})
    await send({"type": "http.response.body", "body": b""})
