"""SIGTERM's drain in the data plane (`serving/drain.py`, the entry point's exchange): an event
stream ends between two events, never inside one, with `retry:` before its end; a GET stream as
soon as the drain starts, a POST stream once the grace period is nearly over; what the relay
still sends after the end is dropped; readiness says `draining` on both listeners at once; in a
cluster no Gateway listener opens once the drain began.

The gateway runs in process, in front of an in-memory upstream whose event stream the test
feeds chunk by chunk (the HTTP server's part, listeners and connections, is end to end:
tests/e2e/test_drain.py)."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.asgi import Headers
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.listeners import DynamicListeners
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.drain import RETRY, Stream, ends_event
from mcp_oauth_gateway.serving.options import ServeOptions
from unit.fuzz_settings import FUZZ
from unit.resources_fixture import BASE, write
from unit.stages.harness import MemoryResponse, MemoryUpstream, Response, drive

ADMIN, HEALTH = 9911, 9912
EVENT_STREAM: Headers = [(b"content-type", b"text/event-stream")]


@pytest.mark.parametrize(
    ("tail", "between"),
    [
        (b"", True),
        (b"\n", True),
        (b"a\n\n", True),
        (b"a\r\n\r\n", True),
        (b"a\r\r", True),
        (b"a\n\r", True),
        (b"\n\r\n", True),
        (b"a\r\n\n", True),
        (b"data", False),
        (b"ta:1", False),
        (b"a\n", False),
        (b"a\r\n", False),
        (b"a\r", False),
        (b"\r\na", False),
    ],
)
def test_a_stream_is_between_events_after_an_empty_line(tail, between):
    assert ends_event(tail) is between


def reference_between(sent: bytes) -> bool:
    """The SSE line rules applied to everything sent: its last line is complete and empty."""
    if not sent:
        return True
    lines = re.split(rb"\r\n|\r|\n", sent)
    # A complete last line leaves an empty remainder after it.
    return lines[-1] == b"" and lines[-2] == b""


line = st.binary(max_size=6).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b""))
ending = st.sampled_from([b"\n", b"\r", b"\r\n"])
event = st.lists(st.tuples(line, ending), min_size=1, max_size=3).map(
    lambda lines: b"".join(text + end for text, end in lines)
)


@FUZZ
@given(st.lists(st.tuples(event, ending), max_size=4), st.data())
def test_the_tail_kept_tells_the_boundary_however_the_stream_is_cut(events, data):
    sent = b"".join(body + end for body, end in events)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(sent)), max_size=6)))
    stream = Stream(None, get=True)
    at = 0
    for cut in [*cuts, len(sent)]:
        stream.wrote(sent[at:cut])
        at = cut
        prefix = sent[:at]
        # A lone CR may still become a CRLF: both readings end the line it ends.
        assert stream.between_events() is reference_between(prefix), prefix


@dataclass
class FedStream:
    """An upstream event stream the test feeds: `feed(chunk)`, `end()`."""

    status: int = 200
    headers: Headers = field(default_factory=lambda: list(EVENT_STREAM))
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    read: list[bytes] = field(default_factory=list)
    released: int = 0

    def complete_body(self) -> bytes | None:
        return None

    async def chunks(self):
        while (chunk := await self.queue.get()) is not None:
            self.read.append(chunk)
            yield chunk

    def release(self) -> None:
        self.released += 1

    async def feed(self, *chunks: bytes) -> None:
        """Queue `chunks` at once and wait until the relay passed them on."""
        wanted = len(self.read) + len(chunks)
        for chunk in chunks:
            self.queue.put_nowait(chunk)
        while len(self.read) < wanted and not self.released:
            await asyncio.sleep(0)


@pytest.fixture
def apps() -> Iterator[list[GatewayApp]]:
    made: list[GatewayApp] = []
    yield made
    for app in made:
        app.drain.stop()  # no timer left for the tests after


@pytest.fixture
def gateway(tmp_path, apps) -> Callable[[object], GatewayApp]:
    """A gateway whose one route's backend answers `response` (a FedStream, a MemoryResponse)."""

    def make(response: object) -> GatewayApp:
        snapshot = build_snapshot(load_paths([write(tmp_path, BASE)]))
        options = ServeOptions(grace_period=10, status_port=ADMIN, health_port=HEALTH)
        app = GatewayApp(ControlPlane(snapshot), options, upstream=MemoryUpstream(response))
        apps.append(app)
        return app

    return make


def body_of(response: Response) -> bytes:
    assert not response.messages[-1].get("more_body", False), "the response never ended"
    return response.body


async def test_a_get_stream_between_events_ends_when_the_drain_starts(gateway):
    stream = FedStream()
    app = gateway(stream)
    request = asyncio.ensure_future(drive(app, "GET"))
    await stream.feed(b"id: 1\ndata: one\n\n")
    assert not request.done()
    app.drain.start()
    response = await request
    assert response.status == 200
    assert body_of(response) == b"id: 1\ndata: one\n\n" + RETRY
    assert stream.released == 1
    assert not app.drain.streams


async def test_a_get_stream_inside_an_event_ends_after_it_and_sends_nothing_more(gateway):
    stream = FedStream()
    app = gateway(stream)
    request = asyncio.ensure_future(drive(app, "GET"))
    await stream.feed(b"data: one\n\ndata: t")
    app.drain.start()
    await stream.feed(b"wo")
    assert not request.done(), "ended inside an event"
    # The rest of the event and the next come at once: the stream ends between the two.
    await stream.feed(b"\r\n\r\n", b"data: three\n\n")
    response = await request
    assert body_of(response) == b"data: one\n\ndata: two\r\n\r\n" + RETRY


async def test_a_post_stream_waits_for_its_answer_until_the_grace_period_is_nearly_over(gateway):
    stream = FedStream()
    app = gateway(stream)
    request = asyncio.ensure_future(drive(app, "POST", body=b"{}"))
    await stream.feed(b"id: 7\ndata: \n\n")
    app.drain.start()
    await stream.feed(b"data: progress\n\n")
    assert not request.done()
    app.drain.end_all()
    response = await request
    assert body_of(response) == b"id: 7\ndata: \n\ndata: progress\n\n" + RETRY


async def test_a_post_stream_that_sent_nothing_yet_is_ended_after_its_first_event(gateway):
    # Ended empty, a call whose answer may still come could not be resumed (no event id).
    stream = FedStream()
    app = gateway(stream)
    request = asyncio.ensure_future(drive(app, "POST", body=b"{}"))
    while not app.drain.streams:
        await asyncio.sleep(0)
    app.drain.start()
    app.drain.end_all()
    await stream.feed(b"")
    assert not request.done()
    await stream.feed(b'data: {"result": {}}\n\n', b"data: more\n\n")
    response = await request
    assert body_of(response) == b'data: {"result": {}}\n\n' + RETRY


async def test_a_post_stream_answered_during_the_drain_ends_as_the_server_ends_it(gateway):
    stream = FedStream()
    app = gateway(stream)
    request = asyncio.ensure_future(drive(app, "POST", body=b"{}"))
    await stream.feed(b"id: 7\ndata: \n\n")
    app.drain.start()
    await stream.feed(b'data: {"result": {}}\n\n')
    stream.queue.put_nowait(None)
    response = await request
    assert body_of(response) == b'id: 7\ndata: \n\ndata: {"result": {}}\n\n'


async def test_a_compressed_stream_is_left_to_the_grace_period(gateway):
    # Its bytes show no event boundary, and a `retry:` field added would corrupt it.
    stream = FedStream(headers=[*EVENT_STREAM, (b"content-encoding", b"gzip")])
    app = gateway(stream)
    request = asyncio.ensure_future(drive(app, "GET"))
    await stream.feed(b"\x1f\x8b\x08\x00\n\n")
    app.drain.start()
    await stream.feed(b"\x00\x00\n\n")
    assert not request.done()
    stream.queue.put_nowait(None)
    response = await request
    assert body_of(response) == b"\x1f\x8b\x08\x00\n\n\x00\x00\n\n"


async def test_a_get_stream_opened_while_draining_ends_at_once(gateway):
    stream = FedStream()
    app = gateway(stream)
    app.drain.start()
    response = await drive(app, "GET")
    assert (response.status, body_of(response)) == (200, RETRY)


async def test_an_answer_that_is_no_stream_is_left_alone(gateway):
    app = gateway(MemoryResponse())
    app.drain.start()
    response = await drive(app, "POST", body=b"{}")
    assert (response.status, response.body) == (200, b'{"ok": true}')


async def get(app: GatewayApp, port: int, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}") as c:
        return await c.get(path)


async def test_readiness_says_draining_on_both_listeners_once_the_drain_starts(gateway):
    app = gateway(FedStream())
    assert (await get(app, HEALTH, "/readyz")).json() == {"ready": True}
    assert (await get(app, ADMIN, "/status")).json()["draining"] is False
    app.drain.start()
    health = await get(app, HEALTH, "/readyz")
    assert (health.status_code, health.json()) == (503, {"ready": False, "draining": True})
    admin = await get(app, ADMIN, "/readyz")
    assert (admin.status_code, admin.json()) == (
        503,
        {"ready": False, "draining": True, "waitingFor": ["draining"], "degraded": []},
    )
    assert (await get(app, ADMIN, "/status")).json()["draining"] is True


async def test_a_draining_cluster_replica_opens_no_gateway_listener():
    # The controller may still hand over a snapshot with a new port while the server drains.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    servers: list[asyncio.Server] = []
    listeners = DynamicListeners("127.0.0.1", asyncio.Protocol, servers)
    listeners.close()
    listeners.wanted = frozenset({port})
    await listeners.reconcile()
    assert (listeners.bound, servers) == ({}, [])
