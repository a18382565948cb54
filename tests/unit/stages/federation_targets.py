"""The federation stage's targets played in memory (an `Upstream`): each keeps sessions, pages
its tools, streams its calls' answers (a tool `ask` asks the client for a sample first), offers a
GET stream when told to, runs a call of `wait` until the client leaves, and records what it was
sent; and how a test opens a client session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

from mcp_oauth_gateway.asgi import CLAIMS_KEY, Headers
from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget
from mcp_oauth_gateway.proxy.federation.stage import Federation, FederationState
from mcp_oauth_gateway.proxy.federation.target import TargetLink
from mcp_oauth_gateway.proxy.upstream import UpstreamError

from .harness import MemoryResponse, drive

# Each target's tools, served two to a page.
TOOLS = {"a": ["t1", "t2", "t3"], "b": ["u1", "u2"]}
PORTS = {9001: "a", 9002: "b"}


@dataclass
class Targets:
    """The targets as an `Upstream`: each keeps sessions and pages its tools list."""

    down: set[str] = field(default_factory=set)
    # Targets that refuse every request with this HTTP status (their Origin check, say).
    refusing: dict[str, int] = field(default_factory=dict)
    # Slow targets: their lists start an event stream that never sends the answer, and their
    # calls' heads never come (the pool's TimeoutError).
    slow: set[str] = field(default_factory=set)
    # Set: a call's stream stays open after its events, and this is set once they were read.
    left: asyncio.Event | None = None
    calls: list[MemoryResponse] = field(default_factory=list)
    deleted: list[tuple[str, bytes | None]] = field(default_factory=list)
    # Targets that offer a GET stream, and the events it sends (then it ends, or breaks off
    # after its first event for the targets in `broken`, or stays open with `holding`).
    streams: dict[str, list[bytes]] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)
    holding: bool = False
    # Set once a GET stream's events were all read (and relayed).
    streamed: asyncio.Event | None = None
    # Targets that keep their GET stream's events: asked with `Last-Event-ID`, they send those
    # after it. Targets answering a GET with 409 (a stream still open) that many times first.
    resumable: set[str] = field(default_factory=set)
    busy: dict[str, int] = field(default_factory=dict)
    # The protocol version the targets agree to; whether they answer initialize with an event
    # stream that starts with a priming event (an id, empty data), as SDK servers keeping their
    # events do.
    version: str = "2025-06-18"
    priming: bool = False
    # Set once a call of the tool `wait` is under way at its target (it never answers).
    waiting: asyncio.Event | None = None
    gets: list[MemoryResponse] = field(default_factory=list)
    seen: list[tuple[str, Headers, dict[str, object]]] = field(default_factory=list)
    # Each request's target and the time it was given for its response head.
    within: list[tuple[str, float]] = field(default_factory=list)

    async def request(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes],
        headers_within: float,
        tls: object = None,
    ) -> MemoryResponse:
        assert isinstance(body, bytes)
        name = PORTS[int(url.split(":")[2].split("/")[0])]
        self.within.append((name, headers_within))
        if name in self.down:
            raise UpstreamError("connection refused")
        if name in self.refusing:
            return MemoryResponse(self.refusing[name], [], b"refused")
        if method == "DELETE":
            self.deleted.append((name, dict(headers).get(b"mcp-session-id")))
            return MemoryResponse(200, [], b"")
        if method == "GET":
            return self._get(name, headers)
        message = orjson.loads(body) if body else {}
        self.seen.append((name, headers, message))
        if name in self.slow and message.get("method") == "tools/call":
            raise TimeoutError
        if name in self.slow and message.get("method") == "tools/list":
            return MemoryResponse(200, [(b"content-type", b"text/event-stream")], None, hold=True)
        if message.get("method") == "initialize":
            return self._initialized(name, message)
        if message.get("method") == "tools/call":
            return self._call(name, message)
        if message.get("method") == "tools/list":
            return _tools_page(name, message)
        return MemoryResponse(202, [], b"")

    def _get(self, name: str, headers: Headers) -> MemoryResponse:
        """A GET: the target's stream, if it offers one (after `Last-Event-ID` if it keeps
        its events), or a refusal."""
        self.seen.append((name, headers, {}))
        if name not in self.streams:
            return MemoryResponse(405, [], b"")
        if self.busy.get(name):
            self.busy[name] -= 1
            return MemoryResponse(409, [], b"only one stream")
        sent = self.streams[name]
        last = dict(headers).get(b"last-event-id")
        if last is not None and name in self.resumable:
            sent = _after(sent, last)
        fail_after = 1 if name in self.broken else None
        stream = MemoryResponse(
            200,
            SSE,
            None,
            sent,
            fail_after=fail_after,
            hold=self.holding,
            after_stream=self.streamed,
        )
        self.gets.append(stream)
        return stream

    def _initialized(self, name: str, message: dict) -> MemoryResponse:
        """initialize's answer with a session, as JSON or (`priming`) as an event stream."""
        result = {"protocolVersion": self.version, "capabilities": {"tools": {}}}
        session = [(b"mcp-session-id", f"sess-{name}".encode())]
        if self.priming:
            answer = orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
            events = [b"id: 0\ndata: \n\n", b"id: 1\ndata: " + answer + b"\n\n"]
            return MemoryResponse(200, [*SSE, *session], None, events)
        return _answer(message, result, session)

    def _call(self, name: str, message: dict) -> MemoryResponse:
        """A tool call's event stream: `wait` never answers, `ask` asks for a sample first,
        every other answers after a progress event."""
        if message["params"]["name"] == "wait":
            call = MemoryResponse(200, SSE, None, [], hold=True, after_stream=self.waiting)
            self.calls.append(call)
            return call
        events = [_progress(message)]
        if message["params"]["name"] == "ask":
            events.insert(0, ASK)
        events.append(b'data: {"jsonrpc":"2.0","id":1,"result":{"by":"%s"}}\n\n' % name.encode())
        held = self.left is not None
        call = MemoryResponse(200, SSE, None, events, hold=held, after_stream=self.left)
        self.calls.append(call)
        return call

    async def close(self) -> None:
        """Nothing to close."""


SSE = [(b"content-type", b"text/event-stream")]


def _tools_page(name: str, message: dict) -> MemoryResponse:
    """The target's tools two to a page, from the request's cursor."""
    start = int(message.get("params", {}).get("cursor", "0"))
    page = TOOLS[name][start : start + 2]
    result: dict[str, object] = {"tools": [{"name": n} for n in page]}
    if start + 2 < len(TOOLS[name]):
        result["nextCursor"] = str(start + 2)
    return _answer(message, result)


def _after(events: list[bytes], last: bytes) -> list[bytes]:
    """The events after the one with the id `last` (none when no event has it)."""
    ids = [e.split(b"\n", 1)[0].removeprefix(b"id: ") for e in events]
    return events[ids.index(last) + 1 :] if last in ids else []


# A target's own request to the client, numbered as the target numbers them (from 0).
ASK = b'data: {"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{}}\n\n'


def _answer(message: dict, result: dict, headers: Headers | None = None) -> MemoryResponse:
    body = orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
    return MemoryResponse(200, [(b"content-type", b"application/json"), *(headers or [])], body)


def stage(
    targets: Targets,
    timeout: float = 5.0,
    own: dict[str, float] | None = None,
    state: FederationState | None = None,
) -> Federation:
    """The stage over the targets, with the route's `timeout`, the targets' `own`, and the
    route rule's `state` (sessions, kept across reloads)."""
    compiled = tuple(
        CompiledTarget("127.0.0.1", port, "/mcp", n, (own or {}).get(n))
        for port, n in PORTS.items()
    )
    return Federation(compiled, TargetLink(targets, timeout, False), 1 << 20, state)


def rpc(method: str, request_id: object = 1, **params: object) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


INIT = rpc("initialize", protocolVersion="2025-11-25", capabilities={}, clientInfo={"name": "t"})


async def open_session(app: Federation) -> list[tuple[bytes, bytes]]:
    response = await drive(app, "POST", body=INIT)
    assert response.status == 200, response.body
    session = response.header(b"mcp-session-id")
    assert session is not None
    return [(b"mcp-session-id", session)]


# A caller of a route with a policy, as the verified token names it.
ALICE = {CLAIMS_KEY: {"iss": "https://idp", "sub": "alice"}}


async def opened(app: Federation, scope: dict[str, object] = ALICE) -> list[tuple[bytes, bytes]]:
    """A session opened at `app` for the caller `scope` names (with a token that must never
    reach Redis); the headers that name it."""
    headers = [(b"authorization", b"Bearer tok-not-for-redis")]
    response = await drive(app, "POST", body=INIT, headers=headers, scope=scope)
    assert response.status == 200, response.body
    session = response.header(b"mcp-session-id")
    assert session is not None
    return [(b"mcp-session-id", session)]


def sse(body: bytes) -> list[tuple[str | None, bytes]]:
    """Each event of a stream the stage wrote: its id (None: it has none) and its data."""
    out = []
    for part in body.split(b"\n\n"):
        if not part:
            continue
        fields = dict(line.split(b": ", 1) for line in part.split(b"\n"))
        kept = fields.get(b"id")
        out.append((kept.decode() if kept is not None else None, fields[b"data"]))
    return out


def events(body: bytes) -> list[dict]:
    """The messages of an event stream the stage wrote (its events with data)."""
    return [orjson.loads(data) for _, data in sse(body) if data]


def answer(request_id: object) -> bytes:
    """The client's answer to a target's request."""
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": "hi"}})


def _progress(message: dict[str, object]) -> bytes:
    """A call's progress events: its own (when the client asked for progress) and one
    under another request's token, which the gateway must not pass on."""
    params = message["params"]
    meta = params.get("_meta", {}) if isinstance(params, dict) else {}
    own = [meta["progressToken"]] if "progressToken" in meta else []
    out = b""
    for token in [*own, "another-request"]:
        params = {"progressToken": token, "progress": 1}
        note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        out += b"data: " + orjson.dumps(note) + b"\n\n"
    return out


def progress(token: object, by: str) -> bytes:
    """A progress event under `token`, its message naming the target that sent it."""
    params = {"progressToken": token, "progress": 1, "message": by}
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
    return b"data: " + orjson.dumps(note) + b"\n\n"
