"""Every header the gateway reads or sets, sent twice, is refused with a JSON 400 before any
stage reads it, so the gateway never checks one copy while the backend uses another. Raw sockets,
so the request carries exactly the copies the test wrote."""

from __future__ import annotations

import json
import socket

import pytest

from conftest import gateway_beside
from mcp_oauth_gateway.dataplane.headers import FORWARDED, SINGLE

TRANSFORMATION = """    transformation:
      request:
        set:
          - {name: X-User, value: 'jwt.sub'}
"""
MCP = [b"mcp-method", b"mcp-name", b"mcp-session-id", b"mcp-protocol-version", b"mcp-param-a"]


@pytest.fixture(scope="module")
def gateway(stack_b, tmp_path_factory, logs):
    """Provider B with a header transformation, trusting forwarded headers; its port."""
    for base in gateway_beside(
        stack_b,
        tmp_path_factory.mktemp("multiplicity"),
        logs,
        "gateway-multiplicity",
        TRANSFORMATION,
        ("--trust-forwarded-headers",),
    ):
        yield int(base.rsplit(":", 1)[1])


def exchange(
    port: int, headers: list[tuple[bytes, bytes]], body: bytes = b"{}"
) -> tuple[int, dict]:
    """Send one request with exactly these header lines; the status and the JSON body."""
    lines = [
        b"POST /mcp HTTP/1.1",
        *(name + b": " + value for name, value in headers),
        b"content-length: %d" % len(body),
        b"connection: close",
        b"",
        b"",
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\r\n".join(lines) + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, {"raw": payload.decode("latin-1")}


def base_headers(port: int, token: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"host", b"127.0.0.1:%d" % port),
        (b"authorization", b"Bearer " + token.encode()),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
    ]


SECOND = {
    b"authorization": b"Basic YWRtaW46YWRtaW4=",
    b"host": b"127.0.0.1:1",
    b"content-type": b"text/plain",
    b"content-length": b"2",
    b"origin": b"https://evil.example",
    b"x-forwarded-host": b"evil.example",
    b"x-forwarded-proto": b"http",
}


@pytest.mark.parametrize(
    "name", sorted(SINGLE | FORWARDED) + MCP + [b"x-user"], ids=lambda n: n.decode()
)
def test_a_header_the_gateway_reads_or_sets_is_refused_when_repeated(gateway, stack_b, name):
    headers = base_headers(gateway, stack_b.token())
    present = {n for n, _ in headers}
    value = SECOND.get(name, b"second")
    if name not in present and name != b"content-length":
        headers.append((name, b"first"))
    headers.append((name, value))
    status, body = exchange(gateway, headers)
    if name == b"content-length":
        # Two lengths are a framing error the HTTP parser itself refuses before the gateway.
        assert status == 400
        return
    assert status == 400, (name, body)
    assert body["error"] == "invalid_request"
    assert "more than one" in body["error_description"]
    assert name.decode() in body["error_description"].lower()


def test_the_same_request_with_each_header_once_is_served(gateway, stack_b):
    headers = base_headers(gateway, stack_b.token())
    headers += [
        (b"x-user", b"spoofed"),
        (b"x-forwarded-host", b"public.example"),
        (b"mcp-protocol-version", b"2025-11-25"),
    ]
    status, body = exchange(
        gateway,
        headers,
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        ).encode(),
    )
    assert status == 200, body


def test_a_second_authorization_never_reaches_the_backend_even_when_the_first_is_valid(
    gateway, stack_b
):
    other_user = stack_b.token(sub="mallory")
    headers = base_headers(gateway, stack_b.token())
    headers.append((b"authorization", b"Bearer " + other_user.encode()))
    status, body = exchange(gateway, headers)
    assert status == 400
    assert body["error_description"].startswith(
        "the request carries more than one Authorization header"
    )


@pytest.mark.parametrize(
    "name",
    [b"x_user", b"x_forwarded_for", b"mcp_method", b"x_request_id"],
    ids=lambda n: n.decode(),
)
def test_an_underscore_alias_of_a_guarded_header_is_refused(gateway, stack_b, name):
    # Servers that map headers to CGI variables read `X_User` as `X-User`.
    status, body = exchange(gateway, [*base_headers(gateway, stack_b.token()), (name, b"spoof")])
    assert status == 400, body
    assert "would be read as" in body["error_description"]


def exchange_raw(port: int, request: bytes) -> int:
    """Send raw request bytes; the response status."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def test_nul_never_reaches_a_rule(gateway, stack_b):
    # The CEL runtime reads strings only up to a NUL, so a NUL would cut what a rule compares.
    auth = b"authorization: Bearer " + stack_b.token().encode() + b"\r\n"
    path = (
        b"POST /mcp%00/admin HTTP/1.1\r\nhost: gw\r\n"
        + auth
        + b"content-length: 2\r\nconnection: close\r\n\r\n{}"
    )
    assert exchange_raw(gateway, path) == 400
    value = (
        b"POST /mcp HTTP/1.1\r\nhost: gw\r\n"
        + auth
        + b"x-tenant: a\x00b\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
    )
    assert exchange_raw(gateway, value) == 400  # the HTTP parser refuses NUL in a value
    claims = stack_b.token(groups=["mcp-agent\u0000x"])
    status, body = exchange(gateway, base_headers(gateway, claims))
    assert status == 401
    assert "NUL" in body["error_description"]


@pytest.mark.parametrize(
    "named",
    [
        b"authorization",
        b"x-user",
        b"X-Forwarded-For",
        b"mcp-session-id",
        b"keep-alive, x-request-id",
    ],
)
def test_connection_cannot_make_a_header_the_gateway_sets_hop_by_hop(gateway, stack_b, named):
    status, body = exchange(
        gateway,
        [
            *base_headers(gateway, stack_b.token()),
            (b"connection", b"keep-alive"),
            (b"connection", named),
        ],
    )
    assert status == 400, body
    assert "the Connection header names " in body["error_description"]
