"""`subscriptions/listen` on a federated route (the 2026-07-28 wire): a stream opened to every
target with the client's filter (each given only its own resource URIs, under its own names),
one acknowledgement made of theirs, then every target's notifications on the client's stream
under the client's subscription id (the id of its listen request), resource URIs under the
target's prefix. When every target's stream has ended, the client's ends with the listen's
result; a client that leaves closes them all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from ... import jsonrpc
from ...asgi import Receive, Scope, Send
from ...controlplane.federation import offered_uri, split_uri
from ...jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from ...mcp_methods import ACKNOWLEDGED
from ..upstream import UpstreamError, UpstreamResponse
from . import merge, replies, streams, wire
from .exchange import Exchanges
from .fanout import Fanout
from .rewrite import from_target, stray_progress
from .session import ClientSession, TargetSession
from .target import ErrorAnswer, Unavailable
from .wire import WireError

_SUBSCRIPTIONS = "resourceSubscriptions"
_HEADERS = [*streams.STREAM_HEADERS, (b"x-accel-buffering", b"no")]
Messages = AsyncIterator[dict[str, object]]


class Declined(ErrorAnswer):
    """The target answered the listen request with a JSON-RPC error instead of a stream."""

    def __init__(self, answer: dict[str, object], status: int):
        super().__init__(f"it answered subscriptions/listen with {answer.get('error')}")
        self.answer = answer
        self.status = status


def _other_spelling(key: str) -> bool:
    """Whether `key` is read as `resourceSubscriptions` by some server without being it: the
    Python SDK's models take `resource_subscriptions`, case-folding decoders any case."""
    return key != _SUBSCRIPTIONS and key.replace("_", "").casefold() == _SUBSCRIPTIONS.casefold()


def own_filter(wanted: Mapping[str, object], target: str, names: set[str]) -> dict[str, object]:
    """The client's filter as `target` must get it: only its own resource URIs, unprefixed
    (under no other spelling: those would reach every target as the client wrote them)."""
    own = {k: v for k, v in wanted.items() if k != _SUBSCRIPTIONS and not _other_spelling(k)}
    uris = wanted.get(_SUBSCRIPTIONS)
    if isinstance(uris, list):
        split = [split_uri(u, names) if isinstance(u, str) else None for u in uris]
        own[_SUBSCRIPTIONS] = [
            uri for s in split if s is not None for name, uri in [s] if name == target
        ]
    return own


def merged_filter(acks: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
    """What the targets agreed to honor, as one: a type any of them honors, and every URI each
    subscribed to under the target's prefix."""
    merged = merge.union(
        [{k: v for k, v in a.items() if k != _SUBSCRIPTIONS} for a in acks.values()]
    )
    uris = [
        offered_uri(name, uri)
        for name, ack in acks.items()
        if isinstance(own := ack.get(_SUBSCRIPTIONS), list)
        for uri in own
        if isinstance(uri, str)
    ]
    if any(isinstance(a.get(_SUBSCRIPTIONS), list) for a in acks.values()):
        merged[_SUBSCRIPTIONS] = uris
    return merged


def tagged(message: dict[str, object], subscription: object) -> dict[str, object]:
    """A target's notification under the client's subscription id."""
    params = message.get("params")
    params = dict(params) if isinstance(params, dict) else {}
    meta = params.get("_meta")
    params["_meta"] = {
        **(meta if isinstance(meta, dict) else {}),
        wire.META_SUBSCRIPTION: subscription,
    }
    return {**message, "params": params}


async def listen(
    fan: Fanout,
    scope: Scope,
    session: ClientSession,
    message: dict[str, object],
    receive: Receive,
    send: Send,
) -> None:
    """Answer a `subscriptions/listen` request with the merged stream."""
    request_id = message["id"]
    params = jsonrpc.params_of(message)
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        raise WireError(
            INVALID_PARAMS, "subscriptions/listen needs params.notifications, an object"
        )
    names = set(session.targets)
    opened: dict[str, tuple[UpstreamResponse, Messages]] = {}
    acks: dict[str, Mapping[str, object]] = {}

    async def open_stream(target: TargetSession) -> None:
        name = target.target.name
        own = {**message, "params": {**params, "notifications": own_filter(wanted, name, names)}}
        response = await fan.link.send(scope, target, jsonrpc.write_message(own))
        if not streams.is_stream(response):
            try:
                answer = await fan.link.answer(target, response, request_id)
            finally:
                response.release()
            raise Declined(answer, response.status)
        messages = aiter(streams.messages(response))
        try:
            ack = await _acknowledgement(fan, target, messages)
        except BaseException:
            response.release()
            raise
        opened[name], acks[name] = (response, messages), ack

    try:
        failures = await fan.each(session, open_stream)
        if not opened:
            await _none_opened(send, request_id, failures)
            return
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        ack = {"_meta": {wire.META_SUBSCRIPTION: request_id}, "notifications": merged_filter(acks)}
        await _write(send, {"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": ack})
        await streams.while_connected(_relay(opened, send, request_id), receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        for response, _ in opened.values():
            response.release()


async def _acknowledgement(
    fan: Fanout, target: TargetSession, messages: Messages
) -> Mapping[str, object]:
    """The filter the target's first message says it honors; Unavailable otherwise."""
    timeout = fan.link.timeout_of(target)
    try:
        async with asyncio.timeout(timeout):
            first = await anext(messages)
    except TimeoutError:
        raise Unavailable(f"it did not acknowledge the subscription within {timeout:g}s") from None
    except (StopAsyncIteration, UpstreamError, ValueError):
        raise Unavailable("its stream ended before acknowledging the subscription") from None
    params = first.get("params")
    honored = params.get("notifications") if isinstance(params, dict) else None
    if first.get("method") != ACKNOWLEDGED or not isinstance(honored, dict):
        raise Unavailable("its stream did not start with the subscription's acknowledgement")
    return honored


async def _none_opened(send: Send, request_id: object, failures: Mapping[str, Unavailable]) -> None:
    """No target opened a stream: their own refusal when each declined, else an error."""
    declined = [f for f in failures.values() if isinstance(f, Declined)]
    if declined and len(declined) == len(failures):
        await replies.reply(send, declined[0].status, {**declined[0].answer, "id": request_id})
        return
    why = "; ".join(f"{name}: {exc}" for name, exc in failures.items())
    text = f"none of the MCP servers behind this route opened a subscription ({why})"
    await replies.reply(send, 200, jsonrpc.error(request_id, INTERNAL_ERROR, text))


async def _write(send: Send, message: object) -> None:
    await send({"type": "http.response.body", "body": streams.event(message), "more_body": True})


async def _relay(
    opened: Mapping[str, tuple[UpstreamResponse, Messages]], send: Send, subscription: object
) -> None:
    """Every target's notifications onto the client's stream, one whole event at a time;
    the listen's result once all of them have ended."""
    sending = asyncio.Lock()
    nothing_asked = Exchanges()

    async def relay(name: str, messages: Messages) -> None:
        try:
            async for message in messages:
                # Only notifications: a target's own result ends its stream, and this wire
                # has no requests to the client.
                if not isinstance(message.get("method"), str) or "id" in message:
                    continue
                # No call is in flight on this wire's listen stream: progress is no one's.
                if stray_progress(message, name, nothing_asked):
                    continue
                out = from_target(message, name, nothing_asked)
                if out is not None:
                    async with sending:
                        await _write(send, tagged(out, subscription))
        except (UpstreamError, ValueError):
            pass  # that target's stream broke off; the others go on

    await asyncio.gather(*(relay(name, messages) for name, (_, messages) in opened.items()))
    result = {"_meta": {wire.META_SUBSCRIPTION: subscription}, "resultType": "complete"}
    await _write(send, jsonrpc.result(subscription, result))
