"""A client moving between two gateway replicas that share a real Redis, on a federated route
over two `mcp` SDK servers whose tools ask the client back (peers/mcp_asking.py; `p` keeps its
streams' events and resumes them, `q` does not). The client's GET stream carries the gateway's
event ids: left at one replica and resumed at the other with `Last-Event-ID`, it gets what it
missed (kept in Redis by the first replica, and what `p` sent while no stream was open), then
the live stream; an id of another session's, or a forged one, resumes nothing. A target's
request relayed at one replica is answered at the other and its call completes; a call running
at one is cancelled at the other. A real `mcp` SDK client whose stream is cut resumes it at the
other replica by itself."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from federation_support import Federated, asking_server, start_gateway
from support import INITIALIZE, free_port, mcp_headers, new_key, wait_until, wait_until_async

RULES = ['mcp.target == "p" || mcp.target == "q"']
CAPABILITIES = {"sampling": {}, "elicitation": {}, "roots": {}}


@pytest.fixture(scope="module")
def replicas(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[tuple[Federated, list[str]]]:
    ports = {"p": free_port(), "q": free_port()}
    processes = {
        "p": asking_server("p", ports["p"], logs, resumable=True),
        "q": asking_server("q", ports["q"], logs),
    }
    key = new_key("federation-resume-key")
    gateways, urls = [], []
    try:
        for replica in ("one", "two"):
            port = free_port()
            directory = tmp_path_factory.mktemp(f"federation-resume-{replica}")
            env = {"MCP_OAUTH_GATEWAY_REDIS_URL": redis_url}
            gateways.append(start_gateway(directory, logs, port, ports, key, RULES, env=env))
            urls.append(f"http://127.0.0.1:{port}/mcp")
        yield Federated(urls[0], key, logs, ports, processes), urls
    finally:
        for process in [*gateways, *processes.values()]:
            process.stop()


def open_session(url: str, token: str) -> dict[str, str]:
    """A raw client session (it can be asked for sampling, elicitation and roots)."""
    headers = mcp_headers(token)
    init = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": CAPABILITIES}}
    response = httpx.post(url, headers=headers, json=init, timeout=30)
    assert response.status_code == 200, response.text
    headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(url, headers=headers, json=initialized, timeout=30).status_code == 202
    return headers


def events(response: httpx.Response) -> Iterator[tuple[str | None, dict | None]]:
    """Each event of a stream as it comes: its id (None: it has none) and its message (None:
    no data, a priming event)."""
    event_id, data = None, []
    for line in response.iter_lines():
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and (event_id is not None or data):
            text = "\n".join(data)
            yield event_id, json.loads(text) if text else None
            event_id, data = None, []


@contextmanager
def listening(url: str, headers: dict[str, str], last: str | None = None):
    """The session's GET stream at `url` (resumed after `last` when given): its events."""
    sent = {**headers, **({"Last-Event-ID": last} if last is not None else {})}
    with httpx.stream("GET", url, headers=sent, timeout=30) as response:
        assert response.status_code == 200, response.read()
        yield events(response)


def call(url: str, headers: dict[str, str], name: str, request_id: object = 9, **arguments):
    """A tool call's result at `url`, read from its event stream."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    with httpx.stream("POST", url, headers=headers, json=body, timeout=30) as response:
        for _, message in events(response):
            if message is not None and message.get("id") == request_id:
                return message
    raise AssertionError("the call's stream ended without its answer")


def told(url: str, headers: dict[str, str], text: str) -> None:
    """p logs `text` on the session's GET stream (outside the call)."""
    assert call(url, headers, "p_tell", text=text)["result"]["content"][0]["text"] == "told"


def said(message: dict | None) -> object:
    """What a log message on the stream says (None: it is no log message)."""
    if message is None or message.get("method") != "notifications/message":
        return None
    return message["params"]["data"]


def until_said(stream, text: str) -> list[tuple[str | None, object]]:
    """The stream's events up to the log message `text`: (id, what each said)."""
    seen = []
    for event_id, message in stream:
        seen.append((event_id, said(message)))
        if said(message) == text:
            return seen
    raise AssertionError(f"the stream ended before {text!r}: {seen}")


def test_a_stream_left_at_one_replica_is_resumed_at_the_other_with_what_it_missed(replicas):
    stack, (one, two) = replicas
    headers = open_session(one, stack.token())
    with listening(one, headers) as stream:
        primed, first = next(stream)
        assert primed is not None
        assert first is None  # a priming event: an id to resume from, no data
        told(one, headers, "first")
        (kept, text), *_ = [e for e in until_said(stream, "first") if e[1] is not None]
        assert kept is not None
        assert text == "first"
    # No stream is open: p keeps what it sends meanwhile.
    told(two, headers, "missed")
    # Resumed at the other replica after the priming event: the event the first replica kept
    # in Redis, what p sent meanwhile, then the live stream.
    with listening(two, headers, last=primed) as stream:
        got = until_said(stream, "missed")
        told(one, headers, "live")
        got += until_said(stream, "live")
    texts = [text for _, text in got if text is not None]
    assert texts == ["first", "missed", "live"]
    assert got[0][0] == kept  # replayed under the id the first replica gave it
    ids = [event_id for event_id, _ in got]
    assert all(ids)
    assert len(set(ids)) == len(ids)


def test_an_id_of_another_session_or_a_forged_one_resumes_nothing(replicas):
    stack, (one, two) = replicas
    theirs = open_session(one, stack.token(sub="theirs"))
    with listening(one, theirs) as stream:
        told(one, theirs, "their secret")
        their_ids = [e for e, _ in until_said(stream, "their secret")]
    mine = open_session(two, stack.token())
    for last in (their_ids[-1], their_ids[0], "00000000:1-0", "garbage"):
        with listening(two, mine, last=last) as stream:
            primed, nothing = next(stream)
            # Started from now: primed anew, never replaying; the next event is this session's.
            assert nothing is None
            assert primed not in their_ids
            told(two, mine, f"mine after {last}")
            got = until_said(stream, f"mine after {last}")
        assert [t for _, t in got if t is not None] == [f"mine after {last}"]


def test_a_targets_request_relayed_at_one_replica_is_answered_at_the_other(replicas):
    stack, (one, two) = replicas
    headers = open_session(one, stack.token())
    body = {
        "jsonrpc": "2.0",
        "id": "s-1",
        "method": "tools/call",
        "params": {"name": "q_sample", "arguments": {"prompt": "ping"}},
    }
    with httpx.stream("POST", one, headers=headers, json=body, timeout=30) as running:
        stream = events(running)
        asked = next(m for _, m in stream if m is not None and m.get("method"))
        assert asked["method"] == "sampling/createMessage"
        content = {"type": "text", "text": "pong from two"}
        result = {"role": "assistant", "content": content, "model": "m"}
        answer = {"jsonrpc": "2.0", "id": asked["id"], "result": result}
        assert httpx.post(two, headers=headers, json=answer, timeout=30).status_code == 202
        done = next(m for _, m in stream if m is not None and m.get("id") == "s-1")
    assert done["result"]["content"][0]["text"] == "q sampled: pong from two"
    # Answered once: neither replica takes it again.
    for url in (one, two):
        again = httpx.post(url, headers=headers, json=answer, timeout=30)
        assert again.status_code == 400


def test_a_call_running_at_one_replica_is_cancelled_at_the_other(replicas):
    stack, (one, two) = replicas
    headers = open_session(one, stack.token())
    body = {"jsonrpc": "2.0", "id": "w-1", "method": "tools/call", "params": {"name": "q_wait"}}
    with httpx.stream("POST", one, headers=headers, json=body, timeout=30) as running:
        assert running.status_code == 200
        cancel = {"requestId": "w-1", "reason": "the user gave up"}
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
        assert httpx.post(two, headers=headers, json=note, timeout=30).status_code == 202

        def cancelled() -> list[str]:
            found = call(two, headers, "q_cancelled")["result"]["content"][0]["text"]
            return list(json.loads(found))

        wait_until(lambda: "w-1" in cancelled(), what="q's wait cancelled from the other replica")


def test_a_stream_resumed_twice_at_either_replica_skips_nothing(replicas):
    stack, urls = replicas
    headers = open_session(urls[0], stack.token())
    last, texts = None, []
    for turn in range(4):
        url = urls[turn % 2]
        with listening(url, headers, last=last) as stream:
            told(urls[(turn + 1) % 2], headers, f"turn {turn}")
            got = until_said(stream, f"turn {turn}")
        texts += [t for _, t in got if t is not None]
        last = got[-1][0]
    assert texts == [f"turn {n}" for n in range(4)]


class Cuttable(httpx2.AsyncByteStream):
    """A response body that breaks off (as a network would) once `cut` is set; `got` is set
    once a chunk came through."""

    def __init__(self, stream: httpx2.AsyncByteStream, cut: asyncio.Event, got: asyncio.Event):
        self.stream = stream
        self.cut = cut
        self.got = got

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self.stream)
        while True:
            chunk = asyncio.ensure_future(anext(chunks))
            cut = asyncio.ensure_future(self.cut.wait())
            await asyncio.wait({chunk, cut}, return_when=asyncio.FIRST_COMPLETED)
            if self.cut.is_set():
                chunk.cancel()
                raise httpx2.ReadError("the connection broke off")
            cut.cancel()
            try:
                data = chunk.result()
            except StopAsyncIteration:
                return
            self.got.set()
            yield data

    async def aclose(self) -> None:
        await self.stream.aclose()


class Switch(httpx2.AsyncBaseTransport):
    """The client's way to the replicas, as a load balancer: each request goes to the replica
    `port` names; a GET (the client's stream) waits while `open` is clear, and each one's
    body breaks off when its `cuts` event is set."""

    def __init__(self, port: int):
        self.port = port
        self.inner = httpx2.AsyncHTTPTransport()
        self.open = asyncio.Event()
        self.open.set()
        # Each GET: the Last-Event-ID it was sent with, then the replica it reached.
        self.asked: list[str | None] = []
        self.reached: list[int] = []
        self.cuts: list[asyncio.Event] = []
        self.streamed: list[asyncio.Event] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            self.asked.append(request.headers.get("last-event-id"))
            await self.open.wait()
            self.reached.append(self.port)
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"host"]
        sent = httpx2.Request(
            request.method,
            request.url.copy_with(port=self.port),
            headers=[*headers, (b"host", f"127.0.0.1:{self.port}".encode())],
            stream=request.stream,
            extensions=request.extensions,
        )
        response = await self.inner.handle_async_request(sent)
        if request.method != "GET":
            return response
        cut, got = asyncio.Event(), asyncio.Event()
        self.cuts.append(cut)
        self.streamed.append(got)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=Cuttable(response.stream, cut, got),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_the_sdk_client_resumes_its_cut_stream_at_the_other_replica(replicas):
    """The `mcp` SDK client reconnects a GET stream that broke off with the last event id it
    had; through a balancer now sending it to the other replica, it gets what the target sent
    while it was away, then the live stream."""
    stack, urls = replicas
    one, two = (httpx2.URL(url).port for url in urls)
    switch = Switch(one)
    logged: list[object] = []

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    headers = {"Authorization": f"Bearer {stack.token()}"}
    async with (
        httpx2.AsyncClient(transport=switch, headers=headers, timeout=30) as http,
        streamable_http_client(urls[0], http_client=http) as (read, write, *_),
        ClientSession(read, write, logging_callback=logging) as session,
    ):
        await session.initialize()
        # Primed: the targets' streams are open.
        primed = "the client's GET stream primed"
        await wait_until_async(lambda: any(s.is_set() for s in switch.streamed), what=primed)
        await session.call_tool("p_tell", {"text": "before"})
        await wait_until_async(lambda: "before" in logged, what="'before' on the stream")
        # The stream breaks off; the balancer now sends the client to the other replica, and
        # holds its GET until p has sent something meanwhile.
        switch.open.clear()
        switch.port = two
        switch.cuts[0].set()
        await wait_until_async(lambda: len(switch.asked) == 2, what="the client reconnecting")
        await session.call_tool("p_tell", {"text": "while away"})
        switch.open.set()
        await wait_until_async(lambda: "while away" in logged, what="what p sent meanwhile")
        await session.call_tool("p_tell", {"text": "live"})
        await wait_until_async(lambda: "live" in logged, what="the live stream")
    assert logged == ["before", "while away", "live"]
    assert switch.reached == [one, two]
    assert switch.asked[0] is None
    assert switch.asked[1] is not None
