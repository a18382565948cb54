"""A real MCP server (the `mcp` SDK) that keeps its events, so a client resumes its streams with
`Last-Event-ID`: `python mcp_resumable.py PORT`. Tools: `echo`, and `hold`, which runs until the
test releases it. A control side for the test, on the same port (never through a gateway):

- `GET /control/state`: the `hold` calls running, and the `Last-Event-ID` of every GET stream
  opened (null for a fresh one), in order;
- `POST /control/release?name=N`: the `hold` call named N returns;
- `POST /control/notify?text=T`: every session the server knows (those that called a tool) gets
  a log message T outside any call, on its GET stream (kept in the event store either way);
- `POST /control/gate?closed=1|0`: while closed, a GET stream resumed with `Last-Event-ID` is
  held before the server sees it (noted as opened at once), so a test can send events that only
  the resumption can bring."""

from __future__ import annotations

import asyncio
import json
import sys
from urllib.parse import parse_qs

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.session import ServerSession
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore

server = MCPServer("resumable")
# A session per client connection (the SDK hands each request a proxy of its own).
SESSIONS: dict[int, ServerSession] = {}
HELD: dict[str, asyncio.Event] = {}
GETS: list[str | None] = []
GATE = asyncio.Event()
GATE.set()


class Events(EventStore):
    """Every event in memory, under ids counted across streams."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []

    async def store_event(self, stream_id, message):
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback):
        at = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
        if at is None:
            return None
        stream = self.events[at][1]
        for event_id, stream_id, message in self.events[at + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def known(ctx: Context) -> None:
    SESSIONS[id(ctx.session._connection)] = ctx.session


@server.tool()
def echo(text: str, ctx: Context) -> str:
    """Say `text` back."""
    known(ctx)
    return text


@server.tool()
async def hold(name: str, ctx: Context) -> str:
    """Run until the test releases `name`."""
    known(ctx)
    released = HELD.setdefault(name, asyncio.Event())
    await released.wait()
    del HELD[name]
    return f"released {name}"


async def answer(send, payload: object) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def control(scope, send) -> None:
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    action = scope["path"].removeprefix("/control/")
    if action == "release":
        HELD.setdefault(query["name"], asyncio.Event()).set()
    elif action == "notify":
        for session in SESSIONS.values():
            await session.send_log_message(level="info", data=query["text"])
    elif action == "gate":
        (GATE.clear if query["closed"] == "1" else GATE.set)()
    running = [name for name, event in HELD.items() if not event.is_set()]
    await answer(send, {"held": running, "gets": GETS})


def with_control(app):
    """The MCP app, with the control side and a note of every GET stream opened."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if scope["path"].startswith("/control/"):
            return await control(scope, send)
        if scope["method"] == "GET":
            headers = dict(scope["headers"])
            resumed = headers.get(b"last-event-id")
            GETS.append(resumed.decode() if resumed is not None else None)
            if resumed is not None:
                await GATE.wait()
        return await app(scope, receive, send)

    return wrapped


if __name__ == "__main__":
    app = with_control(server.streamable_http_app(event_store=Events()))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
