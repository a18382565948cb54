"""Micro-benchmark: what the request checks added by the security fixes cost, in process.

- the entry header check (repeated guarded headers, underscore aliases, Host syntax) on the
  headers of a typical MCP `tools/call` from a client, per request;
- reading and matching a redirect URI the way browsers do (once per Broker authorize).
Usage: python benchmarks/security_checks.py [N]"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from mcp_oauth_gateway.dataplane.headers import HeaderRules
from mcp_oauth_gateway.urls import parse_redirect_uri, redirect_matches

MCP_CALL = [
    (b"host", b"gateway.example:8080"),
    (b"user-agent", b"node"),
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
    (b"authorization", b"Bearer " + b"x" * 900),
    (b"mcp-protocol-version", b"2025-11-25"),
    (b"mcp-session-id", b"3f1c0a9e6b7d4e2f"),
    (b"content-length", b"120"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"connection", b"keep-alive"),
]
REGISTERED = ("http://127.0.0.1/callback", "http://localhost/callback")
URI = "http://127.0.0.1:53412/callback"


def per_call_us(function: Callable[[], object], n: int) -> float:
    """Median of five timed rounds of `n` calls, in microseconds per call."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            function()
        rounds.append((time.perf_counter() - started) / n * 1e6)
    return sorted(rounds)[2]


def main() -> None:
    """Print the cost of each check."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    plain, trusting = HeaderRules(False), HeaderRules(True)
    with_alias = [*MCP_CALL, (b"x_custom", b"1")]
    rows = [
        ("entry header check, 10 headers", lambda: plain.problem(MCP_CALL), n),
        ("  with --trust-forwarded-headers", lambda: trusting.problem(MCP_CALL), n),
        ("  with an underscore header present", lambda: plain.problem(with_alias), n),
        (
            "redirect URI read + matched (per authorize)",
            lambda: redirect_matches(REGISTERED, parse_redirect_uri(URI)),
            n // 10,
        ),
    ]
    for label, check, count in rows:
        print(f"{label:<46} {per_call_us(check, count):6.2f} us")


if __name__ == "__main__":
    main()
