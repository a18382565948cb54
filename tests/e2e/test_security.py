"""Security checks on the wire: size limits (431/413), request smuggling shapes and header
injection refused, and no token ever written to the gateway's log."""

from __future__ import annotations

import socket

import httpx

from support import wait_until

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def raw(base: str, request: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_oversized_headers_get_431(stack_b):
    response = httpx.post(stack_b.mcp, json=INIT, headers={"X-Padding": "p" * 20_000})
    assert response.status_code == 431
    assert response.json()["error"] == "request_header_fields_too_large"


def test_oversized_body_gets_413(stack_b):
    auth = {"Authorization": f"Bearer {stack_b.token()}"}
    declared = httpx.post(stack_b.mcp, content=b"x" * (11 * 1024 * 1024), headers=auth)
    assert declared.status_code == 413
    assert "exceeds" in declared.json()["error_description"]

    def chunks():
        for _ in range(12):
            yield b"y" * (1024 * 1024)

    streamed = httpx.post(stack_b.mcp, content=chunks(), headers=auth, timeout=30)
    assert streamed.status_code == 413


def test_conflicting_length_and_chunked_is_refused(stack_b):
    answer = raw(
        stack_b.gateway,
        b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]


def test_cr_lf_in_header_values_is_refused(stack_b):
    answer = raw(stack_b.gateway, b"GET /mcp HTTP/1.1\r\nHost: x\r\nX-Evil: a\rInjected: 1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]


def test_tokens_never_reach_the_log(stack_b):
    def access_lines() -> int:
        return stack_b.process.log().count("mcp_oauth_gateway.access: POST /mcp ")

    valid, expired = stack_b.token(), stack_b.token(exp=1)
    before = access_lines()
    for token in (valid, expired, "not.a.token"):
        httpx.post(
            stack_b.mcp,
            json=INIT,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
            },
        )
    # The access log is written in batches by a background thread: wait for these three lines.
    wait_until(lambda: access_lines() >= before + 3, 30, "the three requests' access lines")
    log = stack_b.process.log()
    for token in (valid, expired):
        for part in token.split("."):
            assert part not in log, "a token (or part of one) was written to the log"
    assert "sub=alice" in log  # the access log names the caller instead
