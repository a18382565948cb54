"""Connection limits: the default cap from the descriptor limit, raising that limit, the flags'
validation, the canned 503/408 answers and how the counts are exported."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import h11
import pytest

from mcp_oauth_gateway.asgi import Limits
from mcp_oauth_gateway.cli import main
from mcp_oauth_gateway.connections import (
    ConnectionGuard,
    default_max_connections,
    fd_limit_target,
    parse_count,
    parse_seconds,
)
from mcp_oauth_gateway.dataplane.metrics import ConnectionCounts, Metrics

INFINITY = resource.RLIM_INFINITY


@pytest.mark.parametrize(
    ("fd_limit", "cap"),
    [(1024, 384), (4096, 1920), (65536, 32640), (256, 96), (64, 24), (3, 1), (1, 1)],
)
def test_default_cap_leaves_a_descriptor_per_backend_connection_and_a_reserve(fd_limit, cap):
    assert default_max_connections(fd_limit) == cap


def test_default_cap_never_needs_more_descriptors_than_the_limit():
    for fd_limit in range(8, 70_000, 37):
        cap = default_max_connections(fd_limit)
        assert 2 * cap + min(256, fd_limit // 4) <= fd_limit
        assert cap >= default_max_connections(fd_limit - 37)


@pytest.mark.parametrize(
    ("soft", "hard", "target"),
    [
        (1024, 1_048_576, 65536),  # bounded: a million descriptors is not needed
        (1024, 4096, 4096),  # up to the hard limit
        (100_000, 1_048_576, 100_000),  # never lowered
        (1024, INFINITY, 65536),
        (INFINITY, INFINITY, INFINITY),
        (4096, 4096, 4096),
    ],
)
def test_descriptor_limit_target(soft, hard, target):
    assert fd_limit_target(soft, hard) == target


def test_raise_fd_limit_lifts_a_low_soft_limit_to_the_hard_one():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    # In a child: lowering this process's own limit could break the test run. The lowered
    # soft limit stays below any hard limit a machine can run Python and pytest under.
    script = (
        "import resource\n"
        "from mcp_oauth_gateway.connections import raise_fd_limit\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "low = 64 if hard == resource.RLIM_INFINITY else min(256, hard // 2)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))\n"
        "print(raise_fd_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    reported, in_force = map(int, done.stdout.split())
    expected = 65536 if hard == INFINITY else min(hard, 65536)
    assert reported == in_force == expected


@pytest.mark.parametrize("text", ["0.5", "10", "86400"])
def test_timeouts_accept_positive_seconds(text):
    assert parse_seconds("--header-timeout", text) == float(text)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "1e9", "ten", ""])
def test_timeouts_refuse_other_values_naming_the_flag(text):
    with pytest.raises(ValueError, match=r"^--idle-timeout must be a number of seconds"):
        parse_seconds("--idle-timeout", text)


@pytest.mark.parametrize(("text", "expected"), [("1", 1), ("40", 40), ("100000", 100000)])
def test_max_connections_accepts_whole_numbers(text, expected):
    assert parse_count("--max-connections", text) == expected


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "many", ""])
def test_max_connections_refuses_other_values_naming_the_flag(text):
    with pytest.raises(ValueError, match=r"^--max-connections must be a whole number"):
        parse_count("--max-connections", text)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--header-timeout", "0"),
        ("--idle-timeout", "soon"),
        ("--max-connections", "-1"),
        ("--grace-period", "-1"),
        ("--grace-period", "nan"),
    ],
)
def test_serve_refuses_a_bad_connection_flag_with_one_line_naming_it(flag, value, capsys):
    assert main(["serve", "-f", "does-not-matter.yaml", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {flag} must be ")


def _client_reads(raw: bytes) -> tuple[h11.Response, bytes, bool]:
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("host", "gw")]))
    client.send(h11.EndOfMessage())
    client.receive_data(raw)
    response = client.next_event()
    assert isinstance(response, h11.Response)
    body = b""
    while not isinstance(event := client.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data), event
        body += event.data
    return response, body, client.our_state is h11.MUST_CLOSE


def test_refusal_is_a_complete_503_naming_the_limit_and_its_flag():
    guard = ConnectionGuard(Limits(max_connections=40), ConnectionCounts())
    response, body, must_close = _client_reads(guard.refusal([(b"date", b"today")]))
    assert response.status_code == 503
    assert must_close
    headers = dict(response.headers)
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"retry-after"] == b"1"
    assert headers[b"date"] == b"today"
    payload = json.loads(body)
    assert payload["error"] == "temporarily_unavailable"
    assert "40 open connections" in payload["error_description"]
    assert "--max-connections" in payload["error_description"]


def test_request_timeout_is_a_complete_408_naming_the_timeout():
    guard = ConnectionGuard(Limits(header_timeout=2.5, max_connections=1), ConnectionCounts())
    response, body, must_close = _client_reads(guard.request_timeout([]))
    assert response.status_code == 408
    assert must_close
    assert json.loads(body) == {
        "error": "request_timeout",
        "error_description": "the request head was not complete within 2.5s (--header-timeout)",
    }


def test_guard_publishes_its_cap_and_derives_one_when_none_is_given():
    counts = ConnectionCounts()
    ConnectionGuard(Limits(max_connections=7), counts)
    assert counts.limit == 7
    ConnectionGuard(Limits(), counts)
    assert counts.limit == default_max_connections(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def test_metrics_export_the_connection_counts():
    metrics = Metrics()
    counts = metrics.connections
    counts.open, counts.limit, counts.refused = 5, 40, 3
    counts.header_timeouts, counts.idle_timeouts = 7, 2
    text = metrics.render().decode()
    for sample in (
        "mcp_gateway_connections_open 5.0",
        "mcp_gateway_connections_max 40.0",
        "mcp_gateway_connections_refused_total 3.0",
        'mcp_gateway_connection_timeouts_total{timeout="header"} 7.0',
        'mcp_gateway_connection_timeouts_total{timeout="idle"} 2.0',
    ):
        assert sample + "\n" in text
