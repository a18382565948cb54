"""The event streams a federated route writes to its client: a call's answer, relayed message by
message as its target sends it, and the client's GET stream, merged from its targets' own. Each
message is rewritten on the way (`rewrite.from_target`): a target's request reaches the client
under an id its session minted, resource URIs under the target's prefix. Progress passes only
for a call of the client's in flight at the target that reports it: on a call's stream under
that call's token, on the GET stream under the token of a call in flight there.

Events are written without the targets' event ids: an id is one target's, and a client resuming
with it could not be told which target's stream to resume (no resumption across targets)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from ...asgi import Receive, Send
from ..upstream import UpstreamError, UpstreamResponse
from . import jsonrpc
from .exchange import Exchanges
from .rewrite import foreign_progress, from_target, is_answer, stray_progress
from .session import ClientSession
from .sse import event_data
from .target import MAX_ANSWER_BYTES

log = logging.getLogger("mcp_oauth_gateway.federation")
EVENT_STREAM = b"text/event-stream"
STREAM_HEADERS = [(b"content-type", EVENT_STREAM), (b"cache-control", b"no-cache")]


def event(message: object) -> bytes:
    """One message as an event of the client's stream."""
    return b"data: " + jsonrpc.dumps(message) + b"\n\n"


def is_stream(response: UpstreamResponse) -> bool:
    """Whether a target answered with an event stream (else: JSON)."""
    content_type = next((v for k, v in response.headers if k.lower() == b"content-type"), b"")
    return content_type.lower().startswith(EVENT_STREAM)


async def messages(response: UpstreamResponse) -> AsyncIterator[dict[str, object]]:
    """The JSON-RPC messages of a target's event stream (an event that is none is skipped)."""
    async for data in event_data(response.chunks(), MAX_ANSWER_BYTES):
        try:
            message = jsonrpc.loads(data)
        except ValueError:
            log.info("federated target sent an event that is not JSON")
            continue
        if isinstance(message, dict):
            yield message


async def until_disconnect(receive: Receive) -> None:
    """Returns once the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def while_connected(work: Awaitable[None], receive: Receive) -> None:
    """`work` until it ends or the client goes away (a stream may run for hours: the targets'
    streams are not read for a client that left)."""
    relay = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(receive))
    try:
        await asyncio.wait({relay, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (relay, watcher):
            task.cancel()
        await asyncio.gather(relay, watcher, return_exceptions=True)


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
            out = from_target(message, target, exchanges, method, request_id)
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


async def serve_merged(
    opened: Mapping[str, UpstreamResponse],
    session: ClientSession,
    open_stream: OpenStream,
    receive: Receive,
    send: Send,
) -> None:
    """The client's GET stream, merged from the targets' `opened` ones (each released at the
    end), a target opened again meanwhile joining it; until the client leaves or all end."""
    try:
        await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
        session.joining = asyncio.Queue()
        streams = merged(opened, send, session.exchanges, session.joining, open_stream)
        await while_connected(streams, receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        session.joining = None
        for response in opened.values():
            response.release()


# Opens a target's GET stream for the merged one (None: it offers none, or failed).
OpenStream = Callable[[str], Awaitable[UpstreamResponse | None]]


async def merged(
    streams: Mapping[str, UpstreamResponse],
    send: Send,
    exchanges: Exchanges,
    joining: asyncio.Queue[str] | None = None,
    open_stream: OpenStream | None = None,
) -> None:
    """Every target's GET stream onto the client's, one whole event at a time, until all
    of them have ended. A target named on `joining` (its session opened again while the
    client's stream is open: it was down, or restarted) joins with a stream of its own."""
    sending = asyncio.Lock()
    running: dict[str, asyncio.Future[None]] = {}
    joined: list[UpstreamResponse] = []

    async def relay(target: str, response: UpstreamResponse) -> None:
        try:
            async for message in messages(response):
                if stray_progress(message, target, exchanges):
                    log.debug("federated target %s: progress of no call of its dropped", target)
                    continue
                out = from_target(message, target, exchanges)
                if out is not None:
                    async with sending:
                        body = event(out)
                        await send({"type": "http.response.body", "body": body, "more_body": True})
        except (UpstreamError, ValueError) as exc:
            log.info("federated target %s: its GET stream broke off: %s", target, exc)

    async def join(target: str) -> None:
        assert open_stream is not None
        response = await open_stream(target)
        if response is not None:
            joined.append(response)
            await relay(target, response)

    def next_join() -> asyncio.Future[str] | None:
        return asyncio.ensure_future(joining.get()) if joining is not None else None

    for name, response in streams.items():
        running[name] = asyncio.ensure_future(relay(name, response))
    waiter = next_join()
    try:
        while live := {t for t in running.values() if not t.done()}:
            watched: set[asyncio.Future[Any]] = {*live, *([waiter] if waiter else [])}
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if waiter is not None and waiter.done():
                name = waiter.result()
                if name not in running or running[name].done():
                    running[name] = asyncio.ensure_future(join(name))
                waiter = next_join()
    finally:
        tasks: list[asyncio.Future[Any]] = [*running.values(), *([waiter] if waiter else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for response in joined:
            response.release()
