"""The upstream writer's last word on every request head: whatever header names and values the
stages produced (an exchanged token, a claim, a client's header), the backend parses exactly the
headers the gateway meant, or nothing is written at all. Checked by parsing each head written
with httptools (llhttp, the parser Node's HTTP server uses)."""

from __future__ import annotations

import re

import httptools
import pytest
from fault_backend import RawBackend
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.proxy.request_head import request_head
from mcp_oauth_gateway.proxy.upstream import InvalidRequestHead
from unit.fuzz_settings import FUZZ

TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def parsed(head: bytes) -> list[tuple[bytes, bytes]]:
    """The headers a backend's parser reads from `head`."""
    headers: list[tuple[bytes, bytes]] = []

    class Recorder:
        def on_header(self, name: bytes, value: bytes) -> None:
            headers.append((name.lower(), value))

    parser = httptools.HttpRequestParser(Recorder())
    parser.feed_data(head)
    return headers


@pytest.mark.parametrize(
    "header",
    [
        (b"authorization", b"Bearer x\r\nX-Injected: 1"),
        (b"authorization", b"Bearer x\nX-Injected: 1"),
        (b"authorization", b"Bearer x\rX-Injected: 1"),
        (b"x-mcp-identity", b'{"sub":"a\x00"}'),
        (b"x-user\r\nx-injected", b"1"),
        (b"x-user\x00", b"1"),
        (b"x-user", b"a\x01b"),
        (b"x-user", b"a\x7f"),
    ],
)
def test_a_head_with_a_broken_header_is_never_written(header):
    with pytest.raises(InvalidRequestHead) as refused:
        request_head("POST", b"/mcp", [(b"host", b"b:1"), header], 2)
    assert b"X-Injected" not in str(refused.value).encode()  # the value itself is not echoed


def test_a_request_line_with_a_line_break_is_never_written():
    with pytest.raises(InvalidRequestHead, match="request line"):
        request_head("POST", b"/mcp?a=\r\nX-Injected: 1", [(b"host", b"b:1")], 0)


# Names as the stages can make them: tokens (checked at load), and any bytes at all.
TOKENS = st.text("abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~", min_size=1, max_size=8)
NAMES = TOKENS.map(str.encode) | st.binary(max_size=8) | st.sampled_from([b"authorization"])
VALUES = st.binary(max_size=12) | st.sampled_from([b"v\r\nx-injected: 1", b"v\n", b"\x00"])


@FUZZ
@given(st.lists(st.tuples(NAMES, VALUES), max_size=5))
def test_whatever_the_stages_produced_the_backend_reads_exactly_those_headers(headers):
    try:
        head = request_head("POST", b"/mcp", headers, 0)
    except InvalidRequestHead:
        return
    if not all(TOKEN.fullmatch(n) for n, _ in headers):
        return  # not a name any stage sets (names are checked at load); the parser refuses it
    # Parsers trim the whitespace around a value (how much of it differs): compare without it.
    expected = [(n.lower(), v.strip(b" \t")) for n, v in headers if n.lower() != b"content-length"]
    read = [(n, v.strip(b" \t")) for n, v in parsed(head)]
    assert read == [*expected, (b"content-length", b"0")]


async def test_a_refused_head_writes_nothing_to_the_shared_connection():
    backend = await RawBackend(lambda seen: b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").start()
    pool = RawUpstream()
    try:
        with pytest.raises(InvalidRequestHead):
            await pool.request(
                "POST", f"{backend.url}/mcp", [(b"authorization", b"x\r\nX-Injected: 1")], b"", 5
            )
        response = await pool.request("POST", f"{backend.url}/mcp", [(b"host", b"b")], b"", 5)
        assert response.status == 200
        assert len(backend.seen) == 1
        assert b"injected" not in repr(backend.seen[0]).lower().encode()
    finally:
        await pool.close()
        await backend.stop()
