"""A misbehaving backend for fault tests: slow answers, streams that break, streams that run
until the client goes away (and counts how often the gateway let it know), a stream that stops
in the middle of an event, plain answers for HEAD and 204 checks, and an echo of the request
headers the backend received.

`RawBackend` is the in-process variant for unit tests: raw asyncio streams answering with
scripted bytes (interim responses, bodies where none may be, unsolicited bytes) and never closing
an idle connection on its own, so that only the gateway's pool can be the one that closes it."""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import uvicorn

STATS = {"disconnects": 0, "forever_started": 0}
PLAIN = json.dumps({"plain": True}).encode()


JSON = [(b"content-type", b"application/json")]


async def _answer(send, status: int, headers: list, body: bytes = b"") -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _whole_answer(scope, send) -> bool:
    """Answer the paths whose answer is whole at once; False for a path that streams."""
    path = scope["path"]
    if path == "/stats":
        await _answer(send, 200, JSON, json.dumps(STATS).encode())
    elif path == "/plain":
        # For HEAD uvicorn sends these headers (length included) and no body.
        length = (b"content-length", str(len(PLAIN)).encode())
        await _answer(send, 200, [*JSON, length, (b"x-backend", b"fault")], PLAIN)
    elif path == "/no-content":
        await _answer(send, 204, [(b"x-backend", b"fault")])
    elif path == "/echo-headers":
        seen = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
        await _answer(send, 200, JSON, json.dumps(seen).encode())
    elif path == "/slow":
        await asyncio.sleep(3)
        await _answer(send, 200, [], b"late")
    else:
        return False
    return True


async def _event(send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _forever(receive, send) -> None:
    """Events until the client goes away, which is counted."""
    STATS["forever_started"] += 1
    waiter = asyncio.ensure_future(receive())
    i = 0
    while True:
        await _event(send, f"data: {i}\n\n".encode())
        i += 1
        done, _ = await asyncio.wait({waiter}, timeout=0.05)
        if done and waiter.result()["type"] == "http.disconnect":
            STATS["disconnects"] += 1
            return


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    more = True
    while more:  # the request body first, so the next receive() can only be the disconnect
        more = (await receive()).get("more_body", False)
    if await _whole_answer(scope, send):
        return
    event_stream = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": event_stream})
    if path == "/sse-break":
        for i in range(2):
            await _event(send, f"data: {i}\n\n".encode())
        raise RuntimeError("the backend dies in the middle of the stream")
    if path == "/sse-partial":
        # One whole event, then half of one, then nothing until the client goes away.
        for piece in (b"data: 0\n\n", b"data: half"):
            await _event(send, piece)
        while (await receive())["type"] != "http.disconnect":
            pass
        return
    await _forever(receive, send)


@dataclass
class Seen:
    """One request as the raw backend received it."""

    method: str
    path: str
    headers: dict[str, str]
    connection: int


Answer = Callable[[Seen], bytes | Awaitable[bytes] | AsyncIterator[bytes]]


class RawBackend:
    """HTTP/1.1 on raw asyncio streams: `answer` gives the exact bytes to write back (an async
    iterator writes its pieces one by one, each drained before the next is asked for)."""

    def __init__(self, answer: Answer):
        self.answer = answer
        self.seen: list[Seen] = []
        self.accepted = 0
        self.open = 0  # connections the peer has not closed yet
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> RawBackend:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        """Stop listening and drop the connections still open."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        number = self.accepted
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the peer closed the connection
                request, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
                method, path, _ = request.split(" ")
                headers = {}
                for line in lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                if length:
                    await reader.readexactly(length)
                seen = Seen(method, path, headers, number)
                self.seen.append(seen)
                answer = self.answer(seen)
                if isinstance(answer, AsyncIterator):
                    async for piece in answer:
                        writer.write(piece)
                        await writer.drain()
                    continue
                writer.write(await answer if inspect.isawaitable(answer) else answer)
                await writer.drain()
        finally:
            self.open -= 1
            self._writers.discard(writer)
            writer.close()


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="critical", lifespan="off")
