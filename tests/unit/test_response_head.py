"""The response head the gateway's HTTP protocol writes (response_head.py), read back by an
independent HTTP/1.1 parser (h11): whatever headers an app sends, either the head is refused or a
client reads exactly those headers and a body framed as announced; everything uvicorn's own
writer refuses is refused too."""

from __future__ import annotations

import re

import h11
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mcp_oauth_gateway.response_head import (
    CHUNKED,
    NO_BODY,
    SIZED,
    UNTIL_CLOSE,
    InvalidResponseHead,
    chunk,
    connection_closes,
    content_length,
    default_block,
    response_head,
    valid_name,
)
from unit.fuzz_settings import FUZZ

# uvicorn's own checks (uvicorn/protocols/http/httptools_impl.py), as a second opinion.
UVICORN_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
UVICORN_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
DATE = b"date: Sun, 06 Dec 2026 20:00:00 GMT\r\n"


def head(headers, status=200, method_head=False, http11=True, keep_alive=True, defaults=DATE):
    return response_head(status, headers, defaults, method_head, http11, keep_alive)


def read_back(data: bytes, method: str = "GET"):
    """What an h11 client reads from `data`: the response, its body, whether it must close.
    (h11 sends only HTTP/1.1 requests; it reads a response's framing from its head alone.)"""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=method, target="/", headers=[("host", "gw")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    response = client.next_event()
    assert isinstance(response, h11.Response), response
    body = b""
    while True:
        event = client.next_event()
        if isinstance(event, h11.EndOfMessage):
            break
        if event is h11.NEED_DATA:
            client.receive_data(b"")  # the connection closed: the end of a close-framed body
            continue
        assert isinstance(event, h11.Data), event
        body += event.data
    return response, body, client.their_state


def test_a_sized_json_answer_is_one_head_with_the_date_first():
    data, mode, length, keep = head(
        [(b"content-type", b"application/json"), (b"content-length", b"2")]
    )
    assert data == (
        b"HTTP/1.1 200 OK\r\n" + DATE + b"content-type: application/json\r\n"
        b"content-length: 2\r\n\r\n"
    )
    assert (mode, length, keep) == (SIZED, 2, True)


def test_an_unknown_length_is_chunked_for_http11_and_framed_by_close_for_http10():
    data, mode, _, keep = head([(b"content-type", b"text/event-stream")])
    assert mode == CHUNKED
    assert keep
    assert data.endswith(b"transfer-encoding: chunked\r\n\r\n")
    _, body, _ = read_back(data + chunk(b"data: 1\n\n", False) + chunk(b"", True))
    assert body == b"data: 1\n\n"
    data, mode, _, keep = head([(b"content-type", b"text/event-stream")], http11=False)
    assert (mode, keep) == (UNTIL_CLOSE, False)
    assert b"transfer-encoding" not in data
    assert data.endswith(b"connection: close\r\n\r\n")
    _response, body, _state = read_back(data + b"data: 1\n\n")
    assert body == b"data: 1\n\n"


def test_the_apps_chunked_transfer_encoding_is_replaced_by_the_servers_own():
    data, mode, _, _ = head([(b"Transfer-Encoding", b" Chunked ")])
    assert mode == CHUNKED
    assert data.lower().count(b"transfer-encoding") == 1
    assert b"Chunked" not in data
    data, mode, _, keep = head([(b"transfer-encoding", b"chunked")], http11=False)
    assert (mode, keep) == (UNTIL_CLOSE, False)
    assert b"transfer-encoding" not in data


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_carry_no_body_and_no_framing_of_their_own(status):
    data, mode, _, keep = head([(b"x-a", b"1")], status=status)
    assert mode == NO_BODY
    assert keep
    assert b"transfer-encoding" not in data
    assert b"content-length" not in data
    response, body, _ = read_back(data)
    assert response.status_code == status
    assert body == b""


def test_a_head_answer_keeps_the_length_it_announces_and_has_no_body():
    data, mode, _length, _ = head([(b"content-length", b"11")], method_head=True)
    assert mode == NO_BODY
    assert b"content-length: 11\r\n" in data
    _response, body, _ = read_back(data, method="HEAD")
    assert body == b""


def test_a_304_may_announce_the_length_of_what_it_stands_for():
    _data, mode, _length, _ = head([(b"content-length", b"500")], status=304)
    assert mode == NO_BODY


@pytest.mark.parametrize("status", [100, 101, 103, 199, 600, 99, 0, -1, "200", None])
def test_only_final_statuses_are_answered(status):
    with pytest.raises(InvalidResponseHead):
        head([], status=status)


@pytest.mark.parametrize(
    ("headers", "keep_alive", "stays_open", "close_lines"),
    [
        ([], True, True, 0),
        ([], False, False, 1),  # HTTP/1.0, the client's `close`, or draining
        ([(b"connection", b"close")], True, False, 1),
        ([(b"Connection", b"Keep-Alive, CLOSE")], True, False, 0),
        ([(b"connection", b"keep-alive")], True, True, 0),
    ],
)
def test_connection_close_is_sent_whenever_the_connection_ends(
    headers, keep_alive, stays_open, close_lines
):
    data, _, _, keep = head([*headers, (b"content-length", b"0")], keep_alive=keep_alive)
    assert keep == stays_open
    assert data.count(b"connection: close\r\n") == close_lines
    _response, _, state = read_back(data)
    assert (state is h11.MUST_CLOSE) == (not stays_open)


@pytest.mark.parametrize(
    "value", [b"+5", b"-5", b"1_0", b"0x5", b"5.0", b"", b" ", b"5 5", "\u0665".encode(), b"1" * 19]
)
def test_a_content_length_is_digits_only(value):
    with pytest.raises(InvalidResponseHead):
        content_length(value)
    with pytest.raises(InvalidResponseHead):
        head([(b"content-length", value)])


@pytest.mark.parametrize(("value", "length"), [(b"0", 0), (b"007", 7), (b" 12\t", 12)])
def test_a_content_length_may_have_spaces_around_it(value, length):
    assert content_length(value) == length


@pytest.mark.parametrize(
    "headers",
    [
        [(b"content-length", b"2"), (b"content-length", b"2")],
        [(b"content-length", b"2"), (b"Content-Length", b"3")],
        [(b"content-length", b"2"), (b"transfer-encoding", b"chunked")],
        [(b"transfer-encoding", b"chunked"), (b"content-length", b"2")],
        [(b"transfer-encoding", b"gzip, chunked")],
        [(b"transfer-encoding", b"gzip")],
        [(b"transfer-encoding", b"chunked"), (b"transfer-encoding", b"chunked")],
    ],
)
def test_ambiguous_framing_is_refused(headers):
    with pytest.raises(InvalidResponseHead):
        head(headers)


@pytest.mark.parametrize(
    "header",
    [
        (b"x-a", b"1\r\nset-cookie: stolen=1"),
        (b"x-a", b"1\nset-cookie: stolen=1"),
        (b"x-a", b"1\rset-cookie: stolen=1"),
        (b"x-a", b"1\r\n\r\nHTTP/1.1 200 OK"),
        (b"x-a", b"\x00"),
        (b"x-a", b"\x7f"),
        (b"x-a", b"\x1b[31m"),
        (b"x-a\r\nset-cookie", b"1"),
        (b"x-a: 1\r\nx-b", b"2"),
        (b"x-a:", b"1"),
        (b"x a", b"1"),
        (b"x-a\t", b"1"),
        (b"", b"1"),
        (b"x-\xe9", b"1"),
        (b"x/a", b"1"),
        ("x-a", b"1"),
    ],
)
def test_a_header_that_could_split_or_confuse_the_head_is_refused(header):
    with pytest.raises((InvalidResponseHead, TypeError)):
        head([(b"content-length", b"0"), header])


def test_tabs_and_bytes_above_ascii_are_allowed_in_values():
    data, _, _, _ = head([(b"x-a", b"a\tb \xe9"), (b"content-length", b"0")])
    response, _, _ = read_back(data)
    assert (b"x-a", b"a\tb \xe9") in list(response.headers)


def test_the_servers_own_lines_are_checked_too():
    assert default_block([(b"date", b"today")]) == b"date: today\r\n"
    with pytest.raises(InvalidResponseHead):
        default_block([(b"date", b"today\r\nx: y")])


def test_connection_tokens():
    assert connection_closes(b"close")
    assert connection_closes(b"keep-alive , Close")
    assert not connection_closes(b"closed")
    assert not connection_closes(b"keep-alive")


def test_chunks():
    assert chunk(b"abc", False) == b"3\r\nabc\r\n"
    assert chunk(b"a" * 16, True) == b"10\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n"
    assert chunk(b"", True) == b"0\r\n\r\n"
    assert chunk(b"", False) == b""


names = st.binary(min_size=0, max_size=12) | st.sampled_from(
    [b"content-length", b"Transfer-Encoding", b"connection", b"x-a", b"set-cookie"]
)
values = st.binary(max_size=24) | st.sampled_from([b"0", b"3", b"chunked", b"close", b"a\r\nb"])


@FUZZ
@given(
    headers=st.lists(st.tuples(names, values), max_size=6),
    status=st.sampled_from([200, 201, 204, 304, 404, 500]),
    method_head=st.booleans(),
    http11=st.booleans(),
    keep_alive=st.booleans(),
)
@example(headers=[(b"x", b"\r\nx: y")], status=200, method_head=False, http11=True, keep_alive=True)
def test_a_client_reads_exactly_the_headers_sent_or_the_head_is_refused(
    headers, status, method_head, http11, keep_alive
):
    keep_alive = keep_alive and http11  # the protocol never keeps an HTTP/1.0 connection
    uvicorn_refuses = any(UVICORN_NAME.search(n) or UVICORN_VALUE.search(v) for n, v in headers)
    try:
        data, mode, length, keep = head(headers, status, method_head, http11, keep_alive)
    except InvalidResponseHead:
        return
    assert not uvicorn_refuses, "uvicorn refuses this head, the gateway wrote it"
    body = b"x" * length if mode == SIZED else b""
    framed = chunk(body, True) if mode == CHUNKED else body
    response, read, state = read_back(data + framed, method="HEAD" if method_head else "GET")
    sent = [(n.lower(), v.strip(b" \t")) for n, v in headers if n.lower() != b"transfer-encoding"]
    framing = {b"transfer-encoding", b"connection", b"date"}
    assert [h for h in response.headers if h[0] not in framing] == [
        h for h in sent if h[0] not in framing
    ]
    assert response.status_code == status
    assert read == body
    assert (state is h11.MUST_CLOSE) == (not keep)


def test_valid_names_are_tokens():
    assert valid_name(b"x-request-id")
    assert valid_name(b"!#$%&'*+-.^_`|~")
    assert not valid_name(b"")
    assert not valid_name(b"a b")
