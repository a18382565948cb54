"""The GET stream of a client whose grant is gone (2025-11-25): held by the gateway, it carries
`notifications/elicitation/complete` once the user connected and then ends, so the client opens
it again at the backend, now with the new token."""

from __future__ import annotations

import asyncio
import contextlib

from ..asgi import Receive, Send
from ..usertokens.grants import GrantKey
from .connects import Asked
from .runtime import UserOAuthRuntime

_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-store"),
]


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def hold(
    runtime: UserOAuthRuntime,
    key: GrantKey,
    asked: Asked,
    session: str,
    receive: Receive,
    send: Send,
) -> None:
    """Serve the stream until the elicitation is done (or expires) or the client leaves."""
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    listener = runtime.streams.open(key.text(), session, send)
    watcher = listener.watch(asked.id, runtime.connects.finished)
    gone = asyncio.create_task(_disconnected(receive))
    try:
        waited = {gone} if watcher is None else {gone, watcher}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        runtime.streams.closed(key.text(), session, listener)
    if not gone.cancelled():
        return  # the client left: nothing more to send
    await send({"type": "http.response.body", "body": b"", "more_body": False})
