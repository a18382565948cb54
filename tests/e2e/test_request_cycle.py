"""The gateway's HTTP protocol over real sockets (a uvicorn server with connections.protocol_class
on loopback, tests/peers/protocol_server.py): raw requests with the edge cases, every response
read back by an independent HTTP/1.1 parser (h11). Response splitting is refused, bodies are
framed as announced (sized, chunked, or by the connection's end for HTTP/1.0), HEAD, 204 and
304 carry no body, keep-alive and `Connection: close` hold, `Expect: 100-continue` is answered,
pipelined requests are answered in order, a large response waits for a slow reader (flow
control) and a client that goes away is told to the app."""

from __future__ import annotations

import json
import select
import socket
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import h11
import pytest

from support import PEERS, Process, free_port, wait_for_port, wait_until

# Every wait is bounded by this: far above what a loopback answer takes, far below a hung suite.
WAIT = 15.0


@pytest.fixture(scope="module")
def port(logs: Path) -> Iterator[int]:
    port = free_port()
    server = Process(
        "protocol-server", [sys.executable, str(PEERS / "protocol_server.py"), str(port)], logs
    )
    try:
        wait_for_port(port, server)
        yield port
    finally:
        server.stop()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_until_closed(sock: socket.socket) -> bytes:
    """Everything sent until the server closes the connection (fails when nothing comes for
    WAIT while it stays open)."""
    data = b""
    while True:
        readable, _, _ = select.select([sock], [], [], WAIT)
        if not readable:
            raise AssertionError(
                f"the server sent nothing for {WAIT}s and kept the connection open; "
                f"got {len(data)} bytes: {data[:200]!r}"
            )
        chunk = sock.recv(1 << 16)
        if not chunk:
            return data
        data += chunk


class Client:
    """Raw requests on one connection; each response read as h11 reads it (a client that
    sent that request)."""

    def __init__(self, port: int, http11: bool = True):
        self.sock = connect(port)
        self.h11 = h11.Connection(h11.CLIENT)
        self.version = "1.1" if http11 else "1.0"
        self.sent: list[str] = []

    def request(self, method: str, target: str, headers=(), body: bytes = b"") -> None:
        """Write one request (without waiting for its answer)."""
        lines = [f"{method} {target} HTTP/{self.version}", "Host: 127.0.0.1"]
        lines += [f"{name}: {value}" for name, value in headers]
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        self.sent.append(method)

    def response(self) -> tuple[h11.Response, bytes]:
        """The next response and its body (fails on a protocol error or after WAIT)."""
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        # h11 sends only HTTP/1.1 requests; it reads a response's framing from its head alone.
        request = h11.Request(method=self.sent.pop(0), target="/", headers=[("host", "x")])
        self.h11.send(request)
        self.h11.send(h11.EndOfMessage())
        body = b""
        response = None
        deadline = time.monotonic() + WAIT
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                readable, _, _ = select.select([self.sock], [], [], deadline - time.monotonic())
                assert readable, f"no complete response within {WAIT}s"
                self.h11.receive_data(self.sock.recv(1 << 16))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert response is not None
                return response, body
            else:
                raise AssertionError(f"unexpected {event!r}")

    def get(self, target: str, method: str = "GET", **kwargs) -> tuple[h11.Response, bytes]:
        """Send one request and read its response."""
        self.request(method, target, **kwargs)
        return self.response()

    def closed(self) -> bool:
        """Whether the server closed the connection (its end read, nothing more sent)."""
        return recv_until_closed(self.sock) == b""

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(port: int) -> Iterator[Client]:
    c = Client(port)
    yield c
    c.close()


def headers_of(response: h11.Response) -> dict[bytes, bytes]:
    return dict(response.headers)


def stats(port: int) -> dict[str, int]:
    c = Client(port)
    try:
        return json.loads(c.get("/stats")[1])
    finally:
        c.close()


def test_an_answer_keeps_the_connection_open_for_the_next(client):
    for text in (b"one", b"two"):
        response, body = client.get("/echo", method="POST", body=text)
        assert response.status_code == 200
        assert body == text
        assert headers_of(response)[b"x-version"] == b"1.1"
    assert client.h11.their_state is h11.DONE


@pytest.mark.parametrize(
    "value",
    [
        b"1\r\nset-cookie: stolen=1",
        b"1\nset-cookie: stolen=1",
        b"1\rset-cookie: stolen=1",
        b"1\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        b"1\x00",
        b"\x7f",
    ],
)
def test_a_header_value_that_would_split_the_response_is_refused(client, value):
    response, body = client.get("/header-value?" + urllib.parse.quote(value))
    assert response.status_code == 500
    assert b"set-cookie" not in dict(response.headers)
    assert body == b"Internal Server Error"
    assert client.closed()  # the 500 closes the connection; nothing else arrives


@pytest.mark.parametrize("name", [b"x-a\r\nset-cookie", b"x-a: 1\r\nx-b", b"x-a:", b"x a", b""])
def test_a_header_name_that_would_split_or_confuse_the_response_is_refused(client, name):
    response, _ = client.get("/header-name?" + urllib.parse.quote(name))
    assert response.status_code == 500
    assert client.closed()


def test_a_value_with_tabs_and_non_ascii_bytes_is_written(client):
    value = b"a\tb \xe9"
    response, body = client.get("/header-value?" + urllib.parse.quote(value))
    assert response.status_code == 200
    assert body == b"ok"
    assert headers_of(response)[b"x-echo"] == value


@pytest.mark.parametrize(
    "headers",
    [
        "content-length=5&content-length=5",
        "content-length=5&transfer-encoding=chunked",
        "transfer-encoding=gzip",
        "content-length=+5",
        "content-length=5_0",
    ],
)
def test_ambiguous_framing_from_the_app_is_refused(client, headers):
    response, _ = client.get("/framing?" + urllib.parse.quote(headers))
    assert response.status_code == 500


def test_the_apps_own_chunked_coding_is_the_servers(client):
    response, body = client.get("/framing?" + urllib.parse.quote("transfer-encoding=chunked"))
    assert response.status_code == 200
    assert body == b"hello"
    assert [v for n, v in response.headers if n == b"transfer-encoding"] == [b"chunked"]


@pytest.mark.parametrize(("announced", "sent"), [(b"3", b"6"), (b"6", b"3")])
def test_a_body_longer_or_shorter_than_its_content_length_ends_the_connection(
    port, announced, sent
):
    sock = connect(port)
    try:
        sock.sendall(b"GET /sized?" + announced + b"," + sent + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        data = recv_until_closed(sock)
    finally:
        sock.close()
    # Never more body bytes than announced: a client cannot read a next response into them.
    _head, _, rest = data.partition(b"\r\n\r\n")
    assert len(rest) <= int(announced)
    assert b"HTTP/1.1" not in rest


def test_a_body_of_unknown_length_is_chunked_for_http11(client):
    response, body = client.get("/stream")
    assert headers_of(response)[b"transfer-encoding"] == b"chunked"
    assert body == b"data: 1\n\ndata: 2\n\ndata: 3\n\n"
    assert client.get("/echo", method="POST", body=b"next")[1] == b"next"


def test_an_http10_client_gets_a_body_of_unknown_length_ended_by_close(port):
    c = Client(port, http11=False)
    try:
        response, body = c.get("/stream")
        assert b"transfer-encoding" not in headers_of(response)
        assert headers_of(response)[b"connection"] == b"close"
        assert body == b"data: 1\n\ndata: 2\n\ndata: 3\n\n"
    finally:
        c.close()


def test_an_http10_request_is_answered_and_closed(port):
    c = Client(port, http11=False)
    try:
        response, body = c.get("/echo", method="POST", body=b"old")
        assert body == b"old"
        assert headers_of(response)[b"x-version"] == b"1.0"
        assert headers_of(response)[b"connection"] == b"close"
        assert c.closed()
    finally:
        c.close()


def test_connection_close_from_the_client_closes_after_the_answer(client):
    response, _body = client.get("/echo", headers=[("connection", "close")])
    assert headers_of(response)[b"connection"] == b"close"
    assert client.closed()


def test_head_gets_the_announced_length_and_no_body(port):
    sock = connect(port)
    try:
        sock.sendall(
            b"HEAD /sized?5,5 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /echo?after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = recv_until_closed(sock)
    finally:
        sock.close()
    first, _, second = data.partition(b"\r\n\r\n")
    assert b"content-length: 5" in first
    # The next bytes are the next response's head: no body came after the HEAD answer.
    assert second.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"x-query: after" in second


@pytest.mark.parametrize("status", [b"204", b"304"])
def test_204_and_304_send_no_body_whatever_the_app_sends(port, status):
    target = b"/status?" + status if status == b"204" else b"/not-modified"
    sock = connect(port)
    try:
        sock.sendall(
            b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /echo?after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = recv_until_closed(sock)
    finally:
        sock.close()
    first, _, second = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 " + status)
    assert b"transfer-encoding" not in first
    assert second.startswith(b"HTTP/1.1 200 OK\r\n"), data


@pytest.mark.parametrize("status", ["100", "101", "103"])
def test_an_interim_status_as_the_answer_is_refused(client, status):
    response, _ = client.get("/status?" + status)
    assert response.status_code == 500


def test_expect_100_continue_is_answered_before_the_body_is_sent(port):
    c = Client(port)
    try:
        c.sock.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
        )
        interim = b""
        while b"\r\n\r\n" not in interim:
            chunk = c.sock.recv(1 << 16)
            assert chunk, interim
            interim += chunk
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        c.sock.sendall(b"body")
        c.sent.append("POST")
        response, body = c.response()
        assert response.status_code == 200
        assert body == b"body"
    finally:
        c.close()


def test_pipelined_requests_are_answered_in_order(client):
    texts = [b"first", b"second" * 10_000, b"third"]
    client.sock.sendall(
        b"".join(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(t), t)
            for t in texts
        )
    )
    client.sent += ["POST"] * len(texts)
    assert [client.response()[1] for _ in texts] == texts


def test_a_large_answer_waits_for_a_slow_reader_and_arrives_whole(port):
    size = 4 * 1024 * 1024
    sock = connect(port)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        sock.sendall(b"GET /big?%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % size)
        data = recv_until_closed(sock)
    finally:
        sock.close()
    _head, _, body = data.partition(b"\r\n\r\n")
    assert len(body) == size
    part = 1 << 16
    assert all(body[i] == 65 + (i // part) % 26 for i in range(0, size, part))


def test_a_client_that_goes_away_mid_answer_is_told_to_the_app(port):
    before = stats(port)["disconnects"]
    sock = connect(port)
    sock.sendall(b"GET /wait-for-disconnect HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"data: open" not in data:
        chunk = sock.recv(1 << 16)
        assert chunk, data
        data += chunk
    sock.close()
    wait_until(
        lambda: stats(port)["disconnects"] == before + 1, WAIT, "the app sees the disconnect"
    )


def test_a_failing_app_gets_a_500_and_the_connection_closes(client):
    response, body = client.get("/fail")
    assert response.status_code == 500
    assert body == b"Internal Server Error"
    assert client.closed()


def test_a_request_the_parser_refuses_gets_a_400(port):
    sock = connect(port)
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n")
        data = recv_until_closed(sock)
    finally:
        sock.close()
    assert data.startswith(b"HTTP/1.1 400 ")


def test_a_refused_request_behind_one_being_answered_ends_the_connection_after_that_answer(port):
    c = Client(port)
    try:
        # One write: the parser reads both before the first answer starts.
        c.sock.sendall(b"GET /echo?first HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP AT ALL\r\n\r\n")
        c.sent.append("GET")
        response, _ = c.response()
        # The first request's answer, whole, and the end: no 400 inside or instead of it.
        assert response.status_code == 200
        assert headers_of(response)[b"x-query"] == b"first"
        assert headers_of(response)[b"connection"] == b"close"
        assert c.closed()
    finally:
        c.close()


def test_the_request_target_reaches_the_app_as_uvicorn_gives_it(client):
    response, _ = client.get("/echo?a=%20b&c")
    assert headers_of(response)[b"x-path"] == b"/echo"
    assert headers_of(response)[b"x-query"] == b"a=%20b&c"
