"""The entry check on request headers (`dataplane/headers.py` `HeaderRules`, applied by
`serving/app.py`) where `tests/unit/test_headers.py` does not reach: the answer the entry gives
(a JSON 400 naming the problem, or 431) before any stage or the backend sees the request, and two
decisions of `problem()` left out there (no Host at all; only the first X-Forwarded-Host item
is checked, being the only one used)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.asgi import Limits
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.dataplane.headers import HeaderRules
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from unit.resources_fixture import BASE, write

from .harness import MemoryUpstream, drive


@pytest.fixture
def gateway(tmp_path) -> tuple[GatewayApp, MemoryUpstream]:
    """The fixture route without a policy, proxying to the in-memory upstream."""
    upstream = MemoryUpstream()
    snapshot = build_snapshot(load_paths([write(tmp_path, BASE)]))
    options = ServeOptions(limits=Limits(max_header_bytes=256))
    return GatewayApp(ControlPlane(snapshot), options, upstream), upstream


async def test_a_clean_request_reaches_the_backend(gateway):
    app, upstream = gateway
    response = await drive(app, "POST", body=b"{}", headers=[(b"mcp-session-id", b"s")])
    assert response.status == 200
    assert len(upstream.sent) == 1


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        (
            [(b"mcp-session-id", b"a"), (b"mcp-session-id", b"b")],
            "the request carries more than one Mcp-Session-Id header; send it once",
        ),
        (
            [(b"connection", b"close, X-Forwarded-For")],
            "the Connection header names X-Forwarded-For, which the gateway reads or sets; it "
            "cannot be made hop-by-hop (dropped on the way to the backend)",
        ),
        (
            [(b"x_forwarded_for", b"10.0.0.1")],
            "the header X_Forwarded_For would be read as X-Forwarded-For by some servers; "
            "send X-Forwarded-For",
        ),
    ],
)
async def test_a_refused_header_is_a_json_400_before_any_stage(gateway, headers, problem):
    app, upstream = gateway
    response = await drive(app, "POST", body=b"{}", headers=headers)
    assert response.status == 400
    assert response.json() == {"error": "invalid_request", "error_description": problem}
    assert upstream.sent == []


async def test_a_bad_host_is_refused_before_routing(gateway):
    app, upstream = gateway
    response = await drive(app, "GET", host=b"evil.example/x")
    assert response.status == 400
    assert response.json()["error_description"] == (
        "the Host header b'evil.example/x' is not a host name or address with a port"
    )
    assert upstream.sent == []


async def test_headers_over_the_limit_are_431_before_they_are_checked(gateway):
    app, upstream = gateway
    response = await drive(app, "GET", headers=[(b"x-big", b"x" * 300), (b"x-big", b"y")])
    assert response.status == 431
    assert response.json() == {
        "error": "request_header_fields_too_large",
        "error_description": "the request headers exceed 256 bytes",
    }
    assert upstream.sent == []


def test_a_request_without_host_passes_the_check():
    # HTTP/1.0 without Host: URLs are then built from the listener's own address.
    assert HeaderRules(False).problem([(b"accept", b"*/*")]) is None
    assert HeaderRules(True).problem([]) is None


def test_only_the_first_forwarded_host_is_checked_the_one_the_gateway_uses():
    rules = HeaderRules(True)
    assert (
        rules.problem([(b"host", b"gw"), (b"x-forwarded-host", b"public.example, b@d/x")]) is None
    )
    assert (
        rules.problem([(b"host", b"gw"), (b"x-forwarded-host", b"b@d/x, public.example")])
        is not None
    )
