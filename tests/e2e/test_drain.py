"""SIGTERM drains a gateway replica behind a load balancer, on real processes: two gateways on a
plain route in front of a real MCP server that keeps its events (peers/mcp_resumable.py), the
loopback load balancer in front of them, and real clients. Readiness says `draining` at once;
the listener takes no new connection (the load balancer passes to the other replica), idle
connections close and a request already arriving gets its answer with `Connection: close`;
a call in flight gets its answer; the GET stream ends between events and the client resumes it
at the other replica with Last-Event-ID; the process exits 0; with `--workers` the same. Rolled
in turn, as a Deployment rollout does, the two replicas fail no call of a client calling on."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from drain_support import (
    Replica,
    Resumable,
    call_tool,
    eventually,
    open_session,
    resumable_server,
    start_replica,
)
from loadbalancer_support import LoadBalancer
from node_clients import DrainClient
from support import wait_until, wait_until_async

# Well past what the tests take: the drain ends when nothing is left in flight, not then.
GRACE = 30


@pytest.fixture
def server(logs: Path) -> Iterator[Resumable]:
    resumable = resumable_server(logs)
    try:
        yield resumable
    finally:
        resumable.process.stop()


@pytest.fixture
def replicas(server: Resumable, logs: Path, tmp_path: Path) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    try:
        started += [start_replica(tmp_path, logs, server.port, GRACE) for _ in range(2)]
        yield started
    finally:
        for replica in started:
            replica.process.stop()


def text(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent), result
    return content.text


def drained_cleanly(replica: Replica) -> None:
    """The replica exited 0, logging each drain phase, nothing cut, no traceback."""
    assert replica.exit_code(GRACE + 10) == 0, replica.process.log()[-3000:]
    log = replica.process.log()
    assert "draining: " in log
    assert "drained in " in log
    for noise in ("cut at shutdown", "Traceback", "Exception in ASGI application"):
        assert noise not in log, log[-3000:]


async def test_an_sdk_client_continues_at_the_other_replica(server, replicas):
    a, b = replicas
    heard: list[object] = []

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params.data)

    with LoadBalancer([a.port]) as lb:
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            streamable_http_client(lb.url("/mcp"), http_client=http) as (read, write, *_),
            ClientSession(read, write, logging_callback=logging) as session,
        ):
            await session.initialize()
            assert text(await session.call_tool("echo", {"text": "hello"})) == "hello"
            await eventually(lambda: len(server.state()["gets"]) == 1, what="the GET stream")
            server.notify("before")
            await wait_until_async(lambda: "before" in heard, 30, "the first notification")
            # A call is in flight at the first replica (the only one yet) when the next one is
            # ready and the first is told to go.
            held = asyncio.ensure_future(session.call_tool("hold", {"name": "roll"}))
            await eventually(lambda: server.state()["held"] == ["roll"], what="the call to run")
            lb.add(b.port)
            server.gate(closed=True)
            a.terminate()
            await eventually(a.draining, what="readiness to say draining")
            # The GET stream ended at A between events, and the client opened it again through
            # the load balancer, at B, resuming after the last event it had.
            await eventually(lambda: len(server.state()["gets"]) >= 2, what="the resumed stream")
            resumed = server.state()["gets"][1]
            assert resumed is not None, "the client resumed without Last-Event-ID"
            assert lb.forwarded[b.port] >= 1
            assert not held.done()
            # Sent while the client had no stream: only the resumption brings it.
            server.notify("while away")
            server.gate(closed=False)
            await wait_until_async(lambda: "while away" in heard, 30, "the resumed notification")
            # The call in flight at A gets its answer there.
            server.release("roll")
            assert text(await held) == "released roll"
            server.notify("after")
            await wait_until_async(lambda: "after" in heard, 30, "a notification after")
            assert text(await session.call_tool("echo", {"text": "again"})) == "again"
            assert heard == ["before", "while away", "after"], (heard, server.state())
        drained_cleanly(a)
    assert b.process.popen.poll() is None


async def test_rolling_both_replicas_fails_no_call(server, replicas):
    # As Kubernetes rolls a Deployment: each replica in turn leaves the load balancer, drains,
    # comes back on the same ports and rejoins, while a client keeps calling.
    a, b = replicas
    heard: list[object] = []
    failures: list[BaseException] = []
    answered = [0]

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params.data)

    # The client's connections all start at A, so that each roll moves all of them.
    with LoadBalancer([a.port]) as lb:
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            streamable_http_client(lb.url("/mcp"), http_client=http) as (read, write, *_),
            ClientSession(read, write, logging_callback=logging) as session,
        ):
            await session.initialize()
            assert text(await session.call_tool("echo", {"text": "first"})) == "first"
            await eventually(lambda: len(server.state()["gets"]) == 1, what="the GET stream")
            server.notify("before")
            await wait_until_async(lambda: "before" in heard, 30, "the first notification")
            lb.add(b.port)
            stop = asyncio.Event()

            async def keep_calling() -> None:
                while not stop.is_set():
                    sent = str(answered[0])
                    try:
                        assert text(await session.call_tool("echo", {"text": sent})) == sent
                        answered[0] += 1
                    except Exception as exc:  # every failure is the test's finding
                        failures.append(exc)

            load = asyncio.ensure_future(keep_calling())
            try:
                for replica in (a, b):
                    lb.remove(replica.port)
                    replica.terminate()
                    await asyncio.to_thread(drained_cleanly, replica)
                    await asyncio.to_thread(replica.start_again)
                    await eventually(replica.ready, what="the replica to be ready again")
                    lb.add(replica.port)
                    floor = answered[0] + 5
                    await wait_until_async(lambda f=floor: answered[0] > f, 30, "calls to go on")
            finally:
                stop.set()  # also when the roll failed: no caller left behind
                await load
            server.notify("rolled")
            await wait_until_async(lambda: "rolled" in heard, 30, "a notification after")
        assert failures == []
        assert heard == ["before", "rolled"]
        # Each drain moved the GET stream, resumed each time from the last event it had.
        resumed = server.state()["gets"][1:]
        assert len(resumed) >= 2
        assert None not in resumed


@pytest.mark.parametrize("sdk", ["sdk1", "client2"])
def test_a_typescript_client_continues_at_the_other_replica(server, replicas, logs, sdk):
    a, b = replicas
    with LoadBalancer([a.port]) as lb:
        client = DrainClient(lb.url("/mcp"), logs / f"ts-drain-client-{sdk}.log", sdk)
        try:
            client.call("1", "echo", text="hello")
            assert client.answer("1") == {"called": "1", "text": "hello"}
            wait_until(lambda: len(server.state()["gets"]) == 1, 30, "the GET stream")
            server.notify("before")
            wait_until(lambda: "before" in client.heard(), 30, "the first notification")
            client.call("2", "hold", name="roll")
            wait_until(lambda: server.state()["held"] == ["roll"], 30, "the call to run")
            lb.add(b.port)
            server.gate(closed=True)
            a.terminate()
            wait_until(a.draining, 30, "readiness to say draining")
            wait_until(lambda: len(server.state()["gets"]) >= 2, 30, "the resumed stream")
            assert server.state()["gets"][1] is not None, "resumed without Last-Event-ID"
            server.notify("while away")
            server.gate(closed=False)
            wait_until(lambda: "while away" in client.heard(), 30, "the resumed notification")
            server.release("roll")
            assert client.answer("2") == {"called": "2", "text": "released roll"}
            server.notify("after")
            wait_until(lambda: "after" in client.heard(), 30, "a notification after")
            client.call("3", "echo", text="again")
            assert client.answer("3") == {"called": "3", "text": "again"}
            client.quit()
            assert client.heard() == ["before", "while away", "after"]
            assert not [line for line in client.lines if "error" in line], client.lines
        finally:
            client.stop()
        drained_cleanly(a)
    assert lb.forwarded[b.port] >= 1


def test_readiness_says_draining_at_once_while_a_call_runs(server, replicas):
    a = replicas[0]
    assert a.readiness().status_code == 200
    assert (a.readiness("health").status_code, a.readiness("health").json()) == (
        200,
        {"ready": True},
    )
    headers = open_session(a.url())
    answers: list[httpx.Response] = []
    caller = threading.Thread(
        target=lambda: answers.append(call_tool(a.url(), headers, "hold", name="slow"))
    )
    caller.start()
    wait_until(lambda: server.state()["held"] == ["slow"], 30, "the call to run")
    a.terminate()
    wait_until(a.draining, 30, "readiness to say draining")
    detailed, health = a.readiness(), a.readiness("health")
    assert detailed.status_code == 503
    assert detailed.json()["draining"] is True
    assert detailed.json()["waitingFor"][0] == "draining"
    assert (health.status_code, health.json()) == (503, {"ready": False, "draining": True})
    # The call is still in flight, and answered in full.
    assert caller.is_alive()
    assert server.state()["held"] == ["slow"]
    server.release("slow")
    caller.join(30)
    assert answers[0].status_code == 200
    assert "released slow" in answers[0].text
    drained_cleanly(a)


def head_of(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes."""
    sock.settimeout(30)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def answer_on(sock: socket.socket) -> bytes:
    """One request for a path no route has, and the gateway's whole 404 (the connection kept)."""
    sock.sendall(b"GET /elsewhere HTTP/1.1\r\nHost: gateway\r\n\r\n")
    received = b""
    while not received.endswith(b"}"):  # the JSON body ends the answer
        received += sock.recv(65536)
    return received.lower()


def test_a_draining_replica_takes_nothing_new(server, replicas):
    a, b = replicas
    with LoadBalancer([a.port, b.port]) as lb:
        headers = open_session(a.url())
        caller = threading.Thread(target=lambda: call_tool(a.url(), headers, "hold", name="keep"))
        caller.start()
        wait_until(lambda: server.state()["held"] == ["keep"], 30, "the call to run")
        # Two connections idle between requests, and one whose request head is half there.
        idle, kept = (socket.create_connection(("127.0.0.1", a.port)) for _ in range(2))
        for sock in (idle, kept):
            assert answer_on(sock).startswith(b"http/1.1 404")
        arriving = socket.create_connection(("127.0.0.1", a.port))
        arriving.sendall(b"GET /elsewhere HTTP/1.1\r\nHost: gateway\r\n")
        a.terminate()
        wait_until(a.draining, 30, "readiness to say draining")
        wait_until(a.refuses, 30, "the listener to refuse new connections")
        # A request on a kept connection, and the one that was arriving, are answered, saying
        # that the connection closes; so it does.
        kept.sendall(b"GET /elsewhere HTTP/1.1\r\nHost: gateway\r\n\r\n")
        arriving.sendall(b"\r\n")
        for sock in (kept, arriving):
            answer = head_of(sock).lower()
            assert answer.startswith(b"http/1.1 404"), answer
            assert b"\r\nconnection: close\r\n" in answer
        # The connection left idle is closed (once no client would still reuse it).
        assert head_of(idle) == b"", "the idle connection was not closed"
        # New connections through the load balancer all reach B.
        refused, forwarded = lb.refused[a.port], lb.forwarded[b.port]
        for _ in range(4):
            assert httpx.get(lb.url("/elsewhere"), timeout=10).status_code == 404
        assert lb.forwarded[b.port] == forwarded + 4
        assert lb.refused[a.port] > refused
        server.release("keep")
        caller.join(30)
        for sock in (idle, kept, arriving):
            sock.close()
    drained_cleanly(a)


def test_workers_drain_the_same_way(server, logs, tmp_path):
    replica = start_replica(tmp_path, logs, server.port, GRACE, "--workers", "2")
    try:
        headers = open_session(replica.url())
        assert call_tool(replica.url(), headers, "echo", text="hi").status_code == 200
        tails: list[bytes] = []
        flowing = threading.Event()

        def listen() -> None:
            tail = b""
            with httpx.stream("GET", replica.url(), headers=headers, timeout=60) as stream:
                assert stream.status_code == 200
                for chunk in stream.iter_raw():
                    tail = (tail + chunk)[-64:]
                    flowing.set()
            tails.append(tail)

        listener = threading.Thread(target=listen)
        listener.start()
        wait_until(lambda: len(server.state()["gets"]) == 1, 30, "the GET stream to open")
        server.notify("hello")
        assert flowing.wait(30), "the notification never came"
        replica.terminate()
        wait_until(replica.refuses, 30, "every worker to stop accepting")
        listener.join(30)
        # Ended after the whole event, asking the client to come back soon.
        assert len(tails) == 1
        assert tails[0].endswith(b'"data":"hello"}}\r\n\r\nretry: 500\n\n'), tails
        drained_cleanly(replica)
    finally:
        replica.process.stop()
