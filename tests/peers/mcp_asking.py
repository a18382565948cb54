"""A small real MCP server (the `mcp` SDK) whose tools ask the client things back, for federation
tests: `python mcp_asking.py NAME PORT [resumable]`. Inside a call (on the call's own event stream):
`sample` (sampling), `confirm` (elicitation), `roots` (roots/list), `chat` (a log message).
Outside any call (on the GET stream): `announce` sends tools/list_changed and a log message and
asks for the client's roots; `report` reports the progress token it is given as done, then
logs that it did. `wait` runs until cancelled; `heard` names the request ids of the
`notifications/cancelled` that reached this server, and `cancelled` the calls of `wait` that
were cancelled. `link` returns a resource link to `note://NAME`. `tell` logs its text outside the
call (on the GET stream). With `resumable`, the server keeps the events of its streams in memory
(the SDK's event store) and resumes a stream asked for with `Last-Event-ID`; like the SDK's
example store, it keeps one GET stream's events for all its sessions, so a test has one session
at a time use its GET stream."""

from __future__ import annotations

import asyncio
import json
import sys

import uvicorn
from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel

NAME = sys.argv[1]
server = MCPServer(f"asking-{NAME}")
HEARD: list[object] = []
CANCELLED: list[str] = []


class Proceed(BaseModel):
    ok: bool


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    """Ask the client's model to complete `prompt`."""
    message = types.SamplingMessage(
        role="user", content=types.TextContent(type="text", text=prompt)
    )
    result = await ctx.session.create_message(
        [message], max_tokens=20, related_request_id=ctx.request_id
    )
    return f"{NAME} sampled: {result.content.text}"


@server.tool()
async def confirm(ctx: Context) -> str:
    """Ask the user whether to proceed."""
    answer = await ctx.elicit(f"May {NAME} proceed?", Proceed)
    data = answer.data.ok if answer.action == "accept" else None
    return f"{NAME} was told {answer.action} {data}"


@server.tool()
async def roots(ctx: Context) -> str:
    """The client's roots, asked within this call."""
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    listed = await ctx.session.send_request(
        types.ListRootsRequest(), types.ListRootsResult, metadata=metadata
    )
    return f"{NAME} roots: " + ",".join(str(root.uri) for root in listed.roots)


@server.tool()
async def chat(ctx: Context) -> str:
    """Log a message to the client within this call."""
    await ctx.info(f"{NAME} is chatting")
    return "chatted"


@server.tool()
async def announce(ctx: Context) -> str:
    """Tell the client the tools changed and log, then ask its roots, outside this call."""
    await ctx.session.send_tool_list_changed()
    await ctx.session.send_log_message(level="info", data=f"{NAME} announces")
    listed = await ctx.session.list_roots()
    return f"{NAME} heard roots: " + ",".join(str(root.uri) for root in listed.roots)


@server.tool()
async def tell(text: str, ctx: Context) -> str:
    """Log `text` to the client outside this call (on its GET stream)."""
    await ctx.session.send_log_message(level="info", data=text)
    return "told"


@server.tool()
async def report(token: int | str, ctx: Context) -> str:
    """Report `token`'s work done outside this call (on the GET stream), then log that it did."""
    note = f"{NAME} reports"
    await ctx.session.send_progress_notification(token, 1.0, total=1.0, message=note)
    await ctx.session.send_log_message(level="info", data=f"{NAME} reported {token!r}")
    return "reported"


@server.tool()
async def wait(ctx: Context) -> str:
    """Run until cancelled."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        CANCELLED.append(str(ctx.request_id))
        raise
    return "never"


@server.tool()
def heard() -> str:
    """The request ids of the cancellations that reached this server (JSON)."""
    return json.dumps(HEARD)


@server.tool()
def cancelled() -> str:
    """The request ids of the `wait` calls that were cancelled (JSON)."""
    return json.dumps(CANCELLED)


@server.tool()
def link() -> types.ResourceLink:
    """A link to this server's note."""
    return types.ResourceLink(type="resource_link", name="note", uri=f"note://{NAME}")


@server.resource(f"note://{NAME}")
def note() -> str:
    """This server's note."""
    return f"note of {NAME}"


class Kept(EventStore):
    """Every stream's events, in memory, numbered in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []

    async def store_event(self, stream_id: str, message: object) -> str:
        event_id = f"{NAME}-{len(self.events) + 1}"
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback):
        ids = [event_id for event_id, _, _ in self.events]
        if last_event_id not in ids:
            return None
        at = ids.index(last_event_id)
        stream = self.events[at][1]
        for event_id, stream_id, message in self.events[at + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def hearing(app):
    """The MCP app, noting the request id of every `notifications/cancelled` POSTed to it."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages)
        try:
            sent = json.loads(body)
        except ValueError:
            sent = None
        if isinstance(sent, dict) and sent.get("method") == "notifications/cancelled":
            HEARD.append((sent.get("params") or {}).get("requestId"))

        async def replay():
            return messages.pop(0) if messages else await receive()

        return await app(scope, replay, send)

    return wrapped


if __name__ == "__main__":
    store = Kept() if sys.argv[3:] == ["resumable"] else None
    app = hearing(server.streamable_http_app(event_store=store))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
