"""The reverse proxy stage (`proxy/reverse_proxy.py`) on its own, in front of `MemoryUpstream`
(`harness.py`): an in-memory stand-in for the `proxy.upstream.Upstream` protocol, i.e. for the
backend connection pool, which `tests/unit/test_pool.py` and the end-to-end tests
(`tests/e2e/test_proxy_faults.py`, `test_wire.py`) exercise for real over sockets.

What is checked here is the stage's own part: the URL and headers it hands the upstream, the
errors it answers itself (413, 504, 502), and how it relays the answer message by message.
Covered elsewhere, not repeated: bodiless answers and HEAD through a real uvicorn, one `Date`,
`Expect` never forwarded (`tests/unit/test_proxy_framing.py`)."""

from __future__ import annotations

import asyncio

import pytest

from mcp_oauth_gateway.asgi import BodyTooLarge, Receive, Scope, Send
from mcp_oauth_gateway.controlplane.backend_tls import client_context
from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget, TargetTls
from mcp_oauth_gateway.proxy.reverse_proxy import GATEWAY_SET, SANDBOXED, ReverseProxy
from mcp_oauth_gateway.proxy.upstream import InvalidRequestHead, UpstreamError, UpstreamTlsError

from .harness import CLIENT, MemoryResponse, MemoryUpstream, drive

TARGET = CompiledTarget("backend", 9000, "/mcp")
CLIENT_IP = CLIENT[0].encode()
JSON = (b"content-type", b"application/json")


def proxy(
    upstream: MemoryUpstream,
    trust_forwarded: bool = False,
    max_body: int = 1 << 20,
    timeout: float = 2.5,
    latency: list[float] | None = None,
    cors_filtered: bool = False,
) -> ReverseProxy:
    return ReverseProxy(
        TARGET,
        upstream,
        timeout,
        trust_forwarded,
        max_body,
        latency.append if latency is not None else None,
        cors_filtered,
    )


# --- the request handed to the upstream ---------------------------------------------------------


async def test_every_request_goes_to_the_target_url_with_the_query_and_timeout():
    upstream = MemoryUpstream()
    response = await drive(proxy(upstream), "POST", "/mcp/sub/path", query=b"a=1&b=%20", body=b"{}")
    assert response.status == 200
    sent = upstream.last
    # The target's path, not the request's: a route forwards to one MCP endpoint.
    assert (sent.method, sent.url) == ("POST", "http://backend:9000/mcp?a=1&b=%20")
    assert (sent.body, sent.streamed) == (b"{}", False)
    assert sent.headers_within == 2.5


async def test_hop_by_hop_headers_are_dropped_and_forwarding_headers_set():
    upstream = MemoryUpstream()
    await drive(
        proxy(upstream),
        "POST",
        body=b"{}",
        headers=[
            (b"connection", b"keep-alive, X-Hop"),
            (b"keep-alive", b"timeout=5"),
            (b"te", b"trailers"),
            (b"trailer", b"x-sum"),
            (b"upgrade", b"h2c"),
            (b"proxy-authorization", b"Basic eA=="),
            (b"proxy-connection", b"keep-alive"),
            (b"x-hop", b"named by Connection"),
            (b"x-forwarded-for", b"198.51.100.1"),
            (b"x-forwarded-proto", b"https"),
            (b"x-forwarded-host", b"spoofed.example"),
            (b"forwarded", b"for=198.51.100.1"),
            (b"mcp-session-id", b"s-1"),
            (b"mcp-protocol-version", b"2025-06-18"),
            (b"last-event-id", b"41"),
            (b"content-type", b"application/json"),
            (b"content-length", b"2"),
        ],
    )
    assert upstream.last.headers == [
        (b"mcp-session-id", b"s-1"),
        (b"mcp-protocol-version", b"2025-06-18"),
        (b"last-event-id", b"41"),
        (b"content-type", b"application/json"),
        (b"content-length", b"2"),
        (b"x-forwarded-for", CLIENT_IP),  # the client's own claims are not kept
        (b"x-forwarded-proto", b"http"),
        (b"x-forwarded-host", b"gw.test"),  # the Host the client used
        (b"host", b"backend:9000"),
    ]


async def test_trusted_forwarded_headers_are_kept_and_the_chain_extended():
    upstream = MemoryUpstream()
    await drive(
        proxy(upstream, trust_forwarded=True),
        headers=[
            (b"x-forwarded-for", b"198.51.100.1"),
            (b"x-forwarded-proto", b"https"),
            (b"x-forwarded-host", b"mcp.example.com"),
            (b"forwarded", b"for=198.51.100.1"),
        ],
    )
    assert upstream.last.headers == [
        (b"x-forwarded-proto", b"https"),
        (b"x-forwarded-host", b"mcp.example.com"),
        (b"forwarded", b"for=198.51.100.1"),
        (b"x-forwarded-for", b"198.51.100.1, " + CLIENT_IP),
        (b"host", b"backend:9000"),
    ]


async def test_a_request_without_a_client_address_is_forwarded_for_unknown():
    upstream = MemoryUpstream()
    await drive(proxy(upstream), scope={"client": None}, host=None)
    assert upstream.last.header(b"x-forwarded-for") == b"unknown"
    assert upstream.last.header(b"x-forwarded-host") is None  # no Host to pass on


async def test_a_chunked_request_body_is_streamed_to_the_upstream():
    upstream = MemoryUpstream()
    response = await drive(proxy(upstream, max_body=6), "POST", body=[b"ab", b"", b"cd", b"ef"])
    assert response.status == 200
    assert (upstream.last.body, upstream.last.streamed) == (b"abcdef", True)


# --- answered here ------------------------------------------------------------------------------

TOO_LARGE = {
    "error": "request_too_large",
    "error_description": "the request body exceeds 4 bytes, the limit set by "
    "serve --max-body-bytes",
}


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ([(b"content-length", b"5")], b""),  # declared: refused before reading anything
        ([], b"12345"),  # one message
        ([], [b"12", b"34", b"5"]),  # streamed: refused once the limit is crossed
        ([], [b"12345", b""]),
    ],
)
async def test_a_body_over_the_limit_is_413(headers, body):
    upstream = MemoryUpstream()
    response = await drive(proxy(upstream, max_body=4), "POST", headers=headers, body=body)
    assert response.status == 413
    assert response.json() == TOO_LARGE
    assert upstream.sent == []


async def test_an_upstream_that_does_not_answer_in_time_is_504():
    upstream = MemoryUpstream(error=TimeoutError())
    response = await drive(proxy(upstream), "POST", body=b"{}")
    assert response.status == 504
    assert response.json() == {
        "error": "gateway_timeout",
        "error_description": "the MCP backend backend:9000 did not answer within 2.5s",
    }


async def test_an_unreachable_upstream_is_502_without_the_underlying_error():
    latency: list[float] = []
    upstream = MemoryUpstream(error=UpstreamError("connect to 10.0.0.7:9000: refused"))
    response = await drive(proxy(upstream, latency=latency), "POST", body=b"{}")
    assert response.status == 502
    assert response.json() == {
        "error": "bad_gateway",
        "error_description": "the MCP backend backend:9000 is unreachable",
    }
    assert latency == []


async def test_a_target_over_tls_is_sent_its_https_url_and_its_tls_settings():
    tls = TargetTls("mcp.example.com", None, client_context(None))
    target = CompiledTarget("10.0.0.7", 8443, "/mcp", tls=tls)
    upstream = MemoryUpstream()
    response = await drive(ReverseProxy(target, upstream, 2.5, False), "POST", body=b"{}")
    assert response.status == 200
    assert (upstream.last.url, upstream.last.tls) == ("https://10.0.0.7:8443/mcp", tls)
    # The Host header is the address connected to; the server name is only TLS's.
    assert upstream.last.header(b"host") == b"10.0.0.7:8443"


async def test_a_failed_tls_handshake_is_502_saying_why():
    why = "the TLS handshake with backend:9000 failed: certificate verify failed: self-signed"
    upstream = MemoryUpstream(error=UpstreamTlsError(why))
    response = await drive(proxy(upstream), "POST", body=b"{}")
    assert response.status == 502
    assert response.json() == {
        "error": "bad_gateway",
        "error_description": f"the MCP backend backend:9000 is unreachable: {why}",
    }


async def test_a_body_too_large_noticed_by_the_upstream_is_413():
    upstream = MemoryUpstream(error=BodyTooLarge(4))
    response = await drive(proxy(upstream, max_body=4), "POST", body=b"{}")
    assert (response.status, response.json()) == (413, TOO_LARGE)


async def test_a_client_gone_before_its_body_gets_nothing_and_nothing_is_sent_on():
    upstream = MemoryUpstream()
    response = await drive(proxy(upstream), "POST", disconnect_first=True)
    assert response.messages == []
    assert upstream.sent == []


# --- the answer relayed -------------------------------------------------------------------------


async def test_response_headers_lose_hop_by_hop_and_date_and_are_lowercased():
    latency: list[float] = []
    upstream = MemoryUpstream(
        MemoryResponse(
            201,
            [
                # Lowercase `connection` (any case works now; see the test below).
                (b"Content-Type", b"application/json"),
                (b"connection", b"keep-alive, X-Internal"),
                (b"Keep-Alive", b"timeout=5"),
                (b"Transfer-Encoding", b"chunked"),
                (b"Date", b"Thu, 01 Jan 1970 00:00:00 GMT"),
                (b"X-Internal", b"secret"),
                (b"Mcp-Session-Id", b"s-2"),
                (b"Content-Length", b"11"),
            ],
            b'{"id": "x"}',
        )
    )
    response = await drive(proxy(upstream, latency=latency), "POST", body=b"{}")
    assert response.status == 201
    assert response.headers == [
        JSON,
        (b"mcp-session-id", b"s-2"),
        (b"content-length", b"11"),
        *SANDBOXED,
    ]
    assert response.chunks == [b'{"id": "x"}']  # a body already complete goes in one message
    assert upstream.response.released == 1
    assert len(latency) == 1
    assert latency[0] >= 0


async def test_a_204_loses_its_content_length_and_has_an_empty_body():
    upstream = MemoryUpstream(
        MemoryResponse(204, [(b"content-length", b"5"), (b"etag", b'"v"')], b"")
    )
    response = await drive(proxy(upstream), "DELETE")
    assert response.status == 204
    assert response.headers == [(b"etag", b'"v"'), *SANDBOXED]
    assert response.chunks == [b""]


async def test_head_is_forwarded_as_head_and_answered_with_the_length_and_no_body():
    upstream = MemoryUpstream(MemoryResponse(200, [JSON, (b"content-length", b"42")], b""))
    response = await drive(proxy(upstream), "HEAD")
    assert upstream.last.method == "HEAD"
    assert response.headers == [JSON, (b"content-length", b"42"), *SANDBOXED]
    assert response.chunks == [b""]


async def test_sse_is_relayed_chunk_by_chunk_then_ended():
    events = [b"event: message\ndata: 1\n\n", b": ping\n\n", b"data: 2\n\n"]
    upstream = MemoryUpstream(
        MemoryResponse(
            200,
            [(b"Content-Type", b"text/event-stream"), (b"Cache-Control", b"no-cache")],
            None,
            events,
        )
    )
    response = await drive(proxy(upstream), "POST", body=b"{}")
    assert response.headers == [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        *SANDBOXED,
    ]
    assert [(m.get("body"), m.get("more_body")) for m in response.messages[1:]] == [
        (events[0], True),
        (events[1], True),
        (events[2], True),
        (b"", False),
    ]
    assert upstream.response.released == 1


async def test_a_body_still_arriving_is_relayed_as_it_comes():
    upstream = MemoryUpstream(MemoryResponse(200, [JSON], None, [b'{"a":', b" 1}"]))
    response = await drive(proxy(upstream), "POST", body=b"{}")
    assert response.chunks == [b'{"a":', b" 1}", b""]


async def test_a_stream_the_backend_breaks_is_ended_for_the_client():
    upstream = MemoryUpstream(
        MemoryResponse(
            200,
            [(b"content-type", b"text/event-stream")],
            None,
            [b"data: 1\n\n", b"data: 2\n\n"],
            fail_after=1,
        )
    )
    response = await drive(proxy(upstream), "GET")
    assert response.status == 200
    assert response.chunks == [b"data: 1\n\n", b""]
    assert upstream.response.released == 1


async def test_a_client_leaving_a_stream_stops_the_reading_of_the_backend():
    left = asyncio.Event()
    answer = MemoryResponse(
        200,
        [(b"content-type", b"text/event-stream")],
        None,
        [b"data: 1\n\n", b"data: 2\n\n"],
        hold=True,
        after_stream=left,
    )
    upstream = MemoryUpstream(answer)
    response = await drive(proxy(upstream), "GET", client_left=left)
    assert response.chunks == [b"data: 1\n\n", b"data: 2\n\n"]  # never ended: nobody to end it for
    assert response.messages[-1]["more_body"] is True
    assert answer.closed  # the backend stream was abandoned…
    assert answer.released == 1  # …and its connection given back to be dropped


def _holding_stream(left: asyncio.Event | None = None) -> MemoryResponse:
    return MemoryResponse(
        200,
        [(b"content-type", b"text/event-stream")],
        None,
        [b"data: 1\n\n"],
        hold=True,
        after_stream=left,
    )


async def test_a_client_leaving_a_stream_does_not_leave_the_request_cancelled():
    # The relay runs in the request's task and is stopped by cancelling it: that cancellation
    # must end with the relay, or whatever the stages do afterwards (log, audit) is cut short.
    left = asyncio.Event()
    upstream = MemoryUpstream(_holding_stream(left))
    stream = proxy(upstream)
    after: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await stream(scope, receive, send)
        await asyncio.sleep(0)  # would raise CancelledError if a cancellation were pending
        task = asyncio.current_task()
        assert task is not None
        after.append(task.cancelling())

    await drive(app, "GET", client_left=left)
    assert after == [0]
    assert upstream.response.closed


async def test_a_stream_cancelled_from_outside_is_cancelled():
    # A shutdown cancels the request's task: that is not the client leaving, and goes on up.
    started = asyncio.Event()
    upstream = MemoryUpstream(_holding_stream(started))
    request = asyncio.ensure_future(drive(proxy(upstream), "GET"))
    await started.wait()
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert upstream.response.closed
    assert upstream.response.released == 1


BACKEND_CORS = [
    (b"Access-Control-Allow-Origin", b"*"),
    (b"access-control-allow-credentials", b"true"),
    (b"access-control-expose-headers", b"x-secret"),
    (b"vary", b"Accept"),
]


@pytest.mark.parametrize("origin", [[], [(b"origin", b"https://evil.example")]])
async def test_on_a_route_with_a_cors_filter_the_backends_cors_headers_never_pass(origin):
    # With or without an Origin: the route's filter alone decides CORS.
    upstream = MemoryUpstream(MemoryResponse(200, [JSON, *BACKEND_CORS], b"{}"))
    response = await drive(proxy(upstream, cors_filtered=True), headers=origin)
    assert [k for k, _ in response.headers if k.startswith(b"access-control-")] == []
    assert (b"vary", b"Accept") in response.headers


async def test_without_a_cors_filter_the_backend_keeps_its_cors_headers():
    upstream = MemoryUpstream(MemoryResponse(200, [JSON, *BACKEND_CORS], b"{}"))
    response = await drive(proxy(upstream))
    assert (b"access-control-allow-origin", b"*") in response.headers


async def test_response_connection_tokens_are_read_whatever_their_case():
    upstream = MemoryUpstream(
        MemoryResponse(
            200, [JSON, (b"Connection", b"close, X-Internal"), (b"x-internal", b"secret")], b"{}"
        )
    )
    response = await drive(proxy(upstream))
    assert response.header(b"x-internal") is None


async def test_a_request_the_upstream_refuses_to_write_is_502_naming_the_header():
    why = "the value of header authorization holds a control character"
    upstream = MemoryUpstream(error=InvalidRequestHead(why))
    response = await drive(proxy(upstream), "POST", body=b"{}")
    assert response.status == 502
    assert response.json() == {
        "error": "bad_gateway",
        "error_description": f"the request for the MCP backend was not sent: {why}",
    }


@pytest.mark.parametrize(
    "named", [b"x-api-key", b"X-Request-Id", b"keep-alive, accept-encoding, traceparent"]
)
async def test_a_clients_connection_header_never_drops_a_header_the_gateway_set(named):
    # The route's own check refuses such requests first; the writer holds even without it.
    upstream = MemoryUpstream()
    app = ReverseProxy(TARGET, upstream, 2.5, False, kept=GATEWAY_SET | {b"x-api-key"})
    set_by_gateway = [
        (b"x-api-key", b"secret"),
        (b"x-request-id", b"r1"),
        (b"accept-encoding", b"identity"),
        (b"traceparent", b"00-1-2-01"),
    ]
    await drive(app, "POST", body=b"{}", headers=[(b"connection", named), *set_by_gateway])
    for name, value in set_by_gateway:
        assert upstream.last.header(name) == value
