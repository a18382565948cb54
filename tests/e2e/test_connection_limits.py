"""Slow and surplus connections, with real sockets: a client that never completes its request
head or body is closed (408 when part of a head arrived), a streamed response outlives the idle
timeout, connections over `--max-connections` get a 503 before any parsing while the admin
listener and, once a slot frees up, normal requests keep working; /metrics counts all of it."""

from __future__ import annotations

import json
import re
import select
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import PEERS, Process, free_port, gateway_cmd, wait_for_port, wait_until

HEADER_TIMEOUT = 1
IDLE_TIMEOUT = 2
MAX_CONNECTIONS = 8
# Every wait is bounded by this: far above the timeouts under test, far below a hung suite.
WAIT = 15.0


class Gateway:
    def __init__(self, port: int, admin_port: int, process: Process):
        self.port = port
        self.admin = f"http://127.0.0.1:{admin_port}"
        self.base = f"http://127.0.0.1:{port}"
        self.process = process

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def metrics(self) -> dict[str, float]:
        """The scraped samples, by name with labels."""
        text = httpx.get(f"{self.admin}/metrics", timeout=WAIT).text
        return {
            name: float(value)
            for name, _, value in (line.rpartition(" ") for line in text.splitlines())
            if name and not name.startswith("#")
        }


@pytest.fixture(scope="module")
def gateway(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    backend_port = free_port()
    backend = Process(
        "limits-backend", [sys.executable, str(PEERS / "fault_backend.py"), str(backend_port)], logs
    )
    wait_for_port(backend_port, backend)
    port, admin_port = free_port(), free_port()
    config = tmp_path_factory.mktemp("limits") / "gateway.yaml"
    config.write_text(f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: stream}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: Exact, value: /sse-forever}}}}]
      backendRefs: [{{name: stream}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: stream}}
spec:
  mcp:
    targets: [{{name: t, static: {{host: 127.0.0.1, port: {backend_port},
                                   path: /sse-forever}}}}]
""")
    process = Process(
        "gateway-limits",
        [
            *gateway_cmd(config),
            "--status-port",
            str(admin_port),
            "--header-timeout",
            str(HEADER_TIMEOUT),
            "--idle-timeout",
            str(IDLE_TIMEOUT),
            "--max-connections",
            str(MAX_CONNECTIONS),
        ],
        logs,
    )
    try:
        wait_for_port(port, process)
        wait_for_port(admin_port, process)
        yield Gateway(port, admin_port, process)
    finally:
        process.stop()
        backend.stop()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection (fails after WAIT)."""
    data = b""
    deadline = time.monotonic() + WAIT
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], remaining)
        if not readable:
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the gateway kept the connection open for {WAIT}s; got {data!r}")


def read_until(sock: socket.socket, marker: bytes, data: bytes = b"") -> bytes:
    """Read until `marker` arrives (fails on close or after WAIT)."""
    deadline = time.monotonic() + WAIT
    while marker not in data:
        readable, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        assert readable, f"no {marker!r} within {WAIT}s; got {data!r}"
        chunk = sock.recv(65536)
        assert chunk, f"the gateway closed the connection before {marker!r}; got {data!r}"
        data += chunk
    return data


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """Status and headers (lower-case names) of a response head."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


def parse(response: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one complete response with a content-length."""
    head, _, body = response.partition(b"\r\n\r\n")
    status, headers = parse_head(head)
    assert int(headers["content-length"]) == len(body), response
    return status, headers, body


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One complete response with a content-length, leaving the connection open."""
    data = read_until(sock, b"\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(parse_head(head)[1]["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)  # bounded: the socket's timeout is WAIT
        assert chunk, f"the gateway closed the connection mid-response; got {data + body!r}"
        body += chunk
    return parse(head + b"\r\n\r\n" + body)


def open_stream(gateway: Gateway) -> socket.socket:
    """A connection streaming server-sent events, once the first event has arrived."""
    sock = gateway.connect()
    sock.sendall(b"GET /sse-forever HTTP/1.1\r\nHost: gw\r\nAccept: text/event-stream\r\n\r\n")
    read_until(sock, b"data: 0")
    return sock


PARTIAL_HEADS = [
    b"G",
    b"GET /sse-forever HTTP/1.1\r\nHost: gw\r\n",
    b"POST /sse-forever HTTP/1.1\r\nHost: gw\r\nContent-Type: appl",
]


def test_stalled_request_heads_are_closed_with_408_when_a_request_began(gateway):
    before = gateway.metrics()['mcp_gateway_connection_timeouts_total{timeout="header"}']
    silent = [gateway.connect() for _ in range(2)]
    partial = [gateway.connect() for _ in PARTIAL_HEADS]
    try:
        for sock, head in zip(partial, PARTIAL_HEADS, strict=True):
            sock.sendall(head)
        # A client that sent nothing gets nothing: there is no request to answer.
        for sock in silent:
            assert read_until_closed(sock) == b""
        for sock in partial:
            status, headers, body = parse(read_until_closed(sock))
            assert status == 408
            assert headers["connection"] == "close"
            assert headers["content-type"] == "application/json"
            assert json.loads(body) == {
                "error": "request_timeout",
                "error_description": "the request head was not complete within 1s "
                "(--header-timeout)",
            }
    finally:
        for sock in silent + partial:
            sock.close()
    after = gateway.metrics()['mcp_gateway_connection_timeouts_total{timeout="header"}']
    assert after == before + len(silent) + len(partial)


def test_a_request_head_growing_without_end_is_cut_with_431(gateway):
    # The parser would hold the head in memory until it ends: it is bounded while it arrives
    # (twice --max-header-bytes, 16 KiB by default, plus room for the request line).
    with gateway.connect() as sock:
        # Just past the bound (about 48 KiB), and no more: nothing is left unread when the
        # gateway closes, so the answer is not lost to a reset.
        sock.sendall(
            b"GET /sse-forever HTTP/1.1\r\nHost: gw\r\n"
            + (b"X-Filler: " + b"a" * 1000 + b"\r\n") * 52
        )
        status, headers, body = parse(read_until_closed(sock))
    assert status == 431
    assert headers["connection"] == "close"
    assert json.loads(body)["error"] == "request_header_fields_too_large"
    assert "--max-header-bytes 16384" in json.loads(body)["error_description"]


def test_keep_alive_connection_stalling_in_its_second_request_head_gets_408(gateway):
    with gateway.connect() as sock:
        sock.sendall(b"GET /nothing HTTP/1.1\r\nHost: gw\r\n\r\n")
        status, headers, _ = read_response(sock)
        assert status == 404
        assert headers.get("connection") != "close"
        sock.sendall(b"GET /nothing HTTP/1.1\r\nHo")
        status, _, body = parse(read_until_closed(sock))
    assert status == 408
    assert json.loads(body)["error"] == "request_timeout"


def test_stalled_request_body_is_closed_while_a_streamed_response_lives_on(gateway):
    before = gateway.metrics()['mcp_gateway_connection_timeouts_total{timeout="idle"}']
    stream = open_stream(gateway)
    try:
        with gateway.connect() as sock:
            sock.sendall(
                b"POST /sse-forever HTTP/1.1\r\nHost: gw\r\nContent-Type: "
                b'application/json\r\nContent-Length: 100\r\n\r\n{"jsonrpc": '
            )
            # The request is being forwarded, so there is nothing to answer: only a close.
            assert read_until_closed(sock) == b""
        # The stream began before the stalled body and has outlived it: no timer cuts a
        # response to a complete request, however long it runs.
        seen = read_until(stream, b"\n\n")
        last = max(map(int, re.findall(rb"data: (\d+)\n\n", seen)))
        read_until(stream, f"data: {last + 1}\n\n".encode(), seen)
    finally:
        stream.close()
    after = gateway.metrics()['mcp_gateway_connection_timeouts_total{timeout="idle"}']
    assert after == before + 1


def test_connections_over_the_cap_get_503_and_normal_requests_return_once_slots_free(gateway):
    wait_until(
        lambda: gateway.metrics()["mcp_gateway_connections_open"] == 0,
        WAIT,
        "earlier tests' connections to close",
    )
    refused_before = gateway.metrics()["mcp_gateway_connections_refused_total"]
    streams = []
    try:
        streams += [open_stream(gateway) for _ in range(MAX_CONNECTIONS)]
        for _ in range(3):
            with gateway.connect() as surplus:
                status, headers, body = parse(read_until_closed(surplus))
            assert status == 503
            assert headers["connection"] == "close"
            assert headers["retry-after"] == "1"
            assert json.loads(body) == {
                "error": "temporarily_unavailable",
                "error_description": f"the gateway already holds {MAX_CONNECTIONS} open "
                "connections, its limit (--max-connections); try again "
                "shortly",
            }
        # The admin listener is not capped: operators can still read what is going on.
        samples = gateway.metrics()
        assert samples["mcp_gateway_connections_open"] == MAX_CONNECTIONS
        assert samples["mcp_gateway_connections_max"] == MAX_CONNECTIONS
        assert samples["mcp_gateway_connections_refused_total"] == refused_before + 3
        streams.pop().close()
        wait_until(
            lambda: gateway.metrics()["mcp_gateway_connections_open"] == MAX_CONNECTIONS - 1,
            WAIT,
            "the gateway to see the stream close",
        )
        response = httpx.get(f"{gateway.base}/nothing", timeout=WAIT)
        assert response.status_code == 404
        assert response.json()["error"] == "not_found"
    finally:
        for stream in streams:
            stream.close()


def test_chosen_limits_are_logged_once_at_start(gateway):
    # Written by the logging thread: the listener can be up before the line is in the file.
    wait_until(
        lambda: "connections: at most" in gateway.process.log(),
        WAIT,
        "the connection limits to be logged",
    )
    lines = [line for line in gateway.process.log().splitlines() if "connections: at most" in line]
    assert len(lines) == 1
    assert f"at most {MAX_CONNECTIONS} open per process" in lines[0]
    assert f"within {HEADER_TIMEOUT}s" in lines[0]
    assert f"at most {IDLE_TIMEOUT}s" in lines[0]
