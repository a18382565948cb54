"""The entry check on request headers (`dataplane/headers.py`): a header the gateway reads or
sets may appear once, and Host / forwarded headers must be what they claim to be."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.dataplane.headers import FORWARDED, SINGLE, HeaderRules

BASE = [(b"host", b"gw.example:8080"), (b"accept", b"*/*"), (b"content-type", b"application/json")]
EVERY_READ = [
    *sorted(SINGLE - {b"host", b"content-type"}),
    b"mcp-method",
    b"mcp-name",
    b"mcp-session-id",
    b"mcp-protocol-version",
    b"mcp-param-x",
]


@pytest.mark.parametrize("name", [*EVERY_READ, b"host", b"content-type"], ids=lambda n: n.decode())
def test_a_header_the_gateway_reads_is_refused_twice(name):
    headers = [*BASE, (name, b"one")] if name not in (b"host", b"content-type") else list(BASE)
    assert HeaderRules(False).problem(headers) is None
    problem = HeaderRules(False).problem([*headers, (name, b"gw.example")])
    assert problem is not None
    assert "more than one" in problem
    assert name.decode() in problem.lower()


@pytest.mark.parametrize("name", sorted(FORWARDED), ids=lambda n: n.decode())
def test_forwarded_headers_are_refused_twice_only_when_trusted(name):
    headers = [*BASE, (name, b"https"), (name, b"https")]
    if name == b"x-forwarded-host":
        headers = [*BASE, (name, b"a.example"), (name, b"b.example")]
    # Untrusted, the gateway drops them all and sets its own: the copies cannot matter.
    assert HeaderRules(False).problem(headers) is None
    assert "more than one" in (HeaderRules(True).problem(headers) or "")


def test_list_headers_nobody_reads_may_repeat():
    headers = [
        *BASE,
        (b"accept", b"text/event-stream"),
        (b"x-custom", b"a"),
        (b"x-custom", b"b"),
        (b"cache-control", b"no-cache"),
        (b"cache-control", b"no-store"),
    ]
    assert HeaderRules(True).problem(headers) is None


@pytest.mark.parametrize(
    "host",
    [
        b"gw.example",
        b"gw.example:8080",
        b"127.0.0.1:1",
        b"[::1]:8080",
        b"my_gateway:80",
        b"GW.Example",
    ],
)
def test_valid_hosts(host):
    assert HeaderRules(False).problem([(b"host", host)]) is None


@pytest.mark.parametrize(
    "host",
    [
        b"evil.example/x",
        b"evil.example\\@gw",
        b"a@b",
        b"a b",
        b"gw.example:80:80",
        b"gw.example:",
        b"[::1",
        b'"x"',
        b"gw.example?x",
        b"gw.example#x",
        b"",
    ],
)
def test_a_host_that_would_break_the_urls_the_gateway_writes_is_refused(host):
    problem = HeaderRules(False).problem([(b"host", host)])
    assert problem is not None
    assert "Host header" in problem


def test_forwarded_host_and_proto_are_checked_when_trusted():
    bad_host = [(b"host", b"gw"), (b"x-forwarded-host", b"evil/x")]
    bad_proto = [(b"host", b"gw"), (b"x-forwarded-proto", b"javascript")]
    assert HeaderRules(False).problem(bad_host) is None  # ignored when untrusted
    assert "X-Forwarded-Host" in (HeaderRules(True).problem(bad_host) or "")
    assert "X-Forwarded-Proto" in (HeaderRules(True).problem(bad_proto) or "")
    chain = [
        (b"host", b"gw"),
        (b"x-forwarded-host", b"public.example, inner"),
        (b"x-forwarded-proto", b"HTTPS, http"),
    ]
    assert HeaderRules(True).problem(chain) is None


@pytest.mark.parametrize(
    "name",
    [
        b"x_forwarded_for",
        b"x_forwarded_host",
        b"x_request_id",
        b"mcp_method",
        b"mcp_param_x",
        b"content_type",
    ],
)
def test_underscore_aliases_of_guarded_headers_are_refused(name):
    # WSGI/CGI servers read `X_Forwarded_For` as `X-Forwarded-For`.
    for trusted in (False, True):
        problem = HeaderRules(trusted).problem([*BASE, (name, b"spoof")])
        assert problem is not None
        assert "would be read as" in problem


def test_underscores_in_other_headers_are_fine():
    assert HeaderRules(False).problem([*BASE, (b"x_custom_thing", b"1")]) is None
