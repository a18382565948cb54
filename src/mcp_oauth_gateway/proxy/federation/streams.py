"""The event streams a federated route writes to its client for a call: its answer, relayed
message by message as its target sends it (the client's GET stream is `get_stream`'s). Each
message is rewritten on the way (`rewrite.from_target`): a target's request reaches the client
under an id its session minted (made known to the other replicas first: `exchange`), resource
URIs under the target's prefix. Progress passes only for the call of the stream, under that
call's token.

A call's events carry no ids: a call's stream is answered by the replica holding the target's
own stream for it, and finished within the drain's grace period when that replica stops; a
client whose call stream broke off without an answer sends the call again. (The targets' own ids
are one target's each, never passed on.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable

from ... import jsonrpc
from ...asgi import Receive, Send
from ..upstream import UpstreamError, UpstreamResponse
from .exchange import Exchanges
from .rewrite import foreign_progress, from_target, is_answer, withdrawn_id
from .sse import event_data
from .target import MAX_ANSWER_BYTES

log = logging.getLogger("mcp_oauth_gateway.federation")
EVENT_STREAM = b"text/event-stream"
STREAM_HEADERS = [(b"content-type", EVENT_STREAM), (b"cache-control", b"no-cache")]


def event(message: object) -> bytes:
    """One message as an event of the client's stream."""
    return b"data: " + jsonrpc.write_message(message) + b"\n\n"


def is_stream(response: UpstreamResponse) -> bool:
    """Whether a target answered with an event stream (else: JSON)."""
    content_type = next((v for k, v in response.headers if k.lower() == b"content-type"), b"")
    return content_type.lower().startswith(EVENT_STREAM)


async def messages(response: UpstreamResponse) -> AsyncIterator[dict[str, object]]:
    """The JSON-RPC messages of a target's event stream (an event that is none is skipped)."""
    async for data in event_data(response.chunks(), MAX_ANSWER_BYTES):
        try:
            message = jsonrpc.read_message(data)
        except ValueError:
            log.info("federated target sent an event that is not JSON")
            continue
        if isinstance(message, dict):
            yield message


async def until_disconnect(receive: Receive) -> None:
    """Returns once the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def while_connected(
    work: Awaitable[None], receive: Receive, stop: asyncio.Event | None = None
) -> None:
    """`work` until it ends, the client goes away (a stream may run for hours: the targets'
    streams are not read for a client that left), or `stop` is set."""
    tasks: list[asyncio.Future[object]] = [
        asyncio.ensure_future(work),
        asyncio.ensure_future(until_disconnect(receive)),
    ]
    if stop is not None:
        tasks.append(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def relay_call(
    response: UpstreamResponse,
    send: Send,
    target: str,
    call: tuple[str, object, object],
    exchanges: Exchanges,
) -> None:
    """A call's event stream, each message rewritten for the client as it comes; `call`: the
    client's request (method, id, progress token), the only one the stream answers, once (a
    second answer could only be taken for another request's), and the only one whose
    progress it reports."""
    method, request_id, progress = call
    answered = False
    await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
    try:
        async for message in messages(response):
            if foreign_progress(message, progress):
                log.debug("federated target %s: progress of another call dropped", target)
                continue
            withdrawn = withdrawn_id(message)
            if withdrawn is not None:
                await exchanges.recall(target, withdrawn)
            out = from_target(message, target, exchanges, method, request_id)
            await exchanges.settle()
            if out is None or (answered and is_answer(out)):
                continue
            if is_answer(out) and not answered:
                # Answered: no longer in flight, so no progress for it passes on the GET
                # stream from here on (the client may be reading the answer already).
                exchanges.finish(request_id)
                answered = True
            await send({"type": "http.response.body", "body": event(out), "more_body": True})
    except (UpstreamError, ValueError) as exc:
        log.warning("federated answer broke off: %s", exc)
    await send({"type": "http.response.body", "body": b"", "more_body": False})
