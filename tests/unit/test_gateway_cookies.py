"""The gateway's own cookies (the Broker's consent and browser cookies) never reach a backend and
are never set by one; every document a backend serves is sandboxed."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.broker.consent import cookie_names
from mcp_oauth_gateway.gateway_cookies import (
    is_gateways,
    sets_gateway_cookie,
    without_gateway_cookies,
)
from mcp_oauth_gateway.proxy.reverse_proxy import (
    downstream_response_headers,
    upstream_request_headers,
)


@pytest.mark.parametrize("origin", ["http://gw.example", "https://gw.example"])
def test_every_cookie_the_broker_sets_is_the_gateways(origin):
    for name in cookie_names(origin, "0123456789abcdef0123")[:2]:
        assert is_gateways(name.encode()), name


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        (b"a=1", b"a=1"),
        (b"a=1; mcp-authz=x; b=2", b"a=1; b=2"),
        (b"__Host-mcp-consent-abc=y;a=1", b"a=1"),
        (b"mcp-authz=x", None),
        (b"  MCP-Authz =x ; __SECURE-mcp-consent-1=2; mcp-other=3", b"mcp-other=3"),
        (b"mcp-authzz=1; xmcp-authz=2", b"mcp-authzz=1; xmcp-authz=2"),
    ],
)
def test_a_cookie_header_loses_the_gateways_cookies_alone(header, kept):
    assert without_gateway_cookies(header) == kept


def test_the_backend_gets_no_gateway_cookie_and_cannot_set_one():
    scope = {
        "headers": [(b"cookie", b"mcp-authz=B; theme=dark"), (b"host", b"gw")],
        "client": ("127.0.0.1", 1),
    }
    sent = upstream_request_headers(scope, b"backend:80", False, frozenset())
    assert (b"cookie", b"theme=dark") in sent
    alone = dict(scope, headers=[(b"cookie", b"__Host-mcp-authz=B")])
    assert b"cookie" not in dict(upstream_request_headers(alone, b"backend:80", False, frozenset()))
    answered = downstream_response_headers(
        [
            (b"Set-Cookie", b"mcp-authz=forged; Path=/"),
            (b"set-cookie", b"__Host-mcp-consent-0123=; Max-Age=0; Path=/; Secure"),
            (b"set-cookie", b"theme=light; Path=/b"),
            (b"content-type", b"text/html"),
        ]
    )
    assert [v for k, v in answered if k == b"set-cookie"] == [b"theme=light; Path=/b"]
    assert (b"content-security-policy", b"sandbox") in answered
    assert sets_gateway_cookie(b"MCP-AUTHZ=1")
    assert not sets_gateway_cookie(b"theme=mcp-authz")
