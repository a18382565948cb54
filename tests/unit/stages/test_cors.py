"""The CORS filter (`dataplane/cors.py`) on its own: which preflights it answers and how, what it
adds to the answers coming back from inside, and what it leaves alone.

Covered elsewhere, not repeated: the preflight of the provider-B route and CORS on its 401
(`tests/unit/test_dataplane.py`), backend `Access-Control-*` headers being replaced
(`test_backend_cors_headers_never_reach_the_client`), origins never reflected (`test_fuzz.py`)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.controlplane.snapshot import CompiledCors, compile_cors
from mcp_oauth_gateway.dataplane.cors import CorsFilter, with_dpop
from mcp_oauth_gateway.resources.models import CorsPolicy

from .harness import Inner, drive

APP = b"https://app.example"
VARY = (b"vary", b"Origin")


def cors(**settings: object) -> CompiledCors:
    return compile_cors(CorsPolicy(**settings))


def preflight(
    origin: bytes = APP, method: bytes = b"POST", requested: bytes | None = None
) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", origin), (b"access-control-request-method", method)]
    if requested is not None:
        headers.append((b"access-control-request-headers", requested))
    return headers


# --- preflights: answered here, never passed on -------------------------------------------------


async def test_preflight_from_a_listed_origin_is_answered_204_with_the_configured_values():
    inner = Inner()
    stage = CorsFilter(
        inner,
        cors(
            allow_origins=["https://app.example/"],
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        ),
    )
    response = await drive(stage, "OPTIONS", headers=preflight(), inner=inner)
    assert not response.reached
    assert response.status == 204
    assert response.body == b""
    assert response.headers == [
        (b"access-control-allow-origin", APP),  # a trailing slash in the config does not matter
        (b"access-control-allow-methods", b"GET, POST"),
        (b"access-control-max-age", b"5"),  # the Gateway API default
        VARY,
        (b"content-length", b"0"),
        (b"access-control-allow-headers", b"Authorization, Content-Type"),
    ]


async def test_a_method_outside_allow_methods_gets_the_list_without_it():
    # The filter does not refuse the method itself: the browser compares it with the list.
    stage = CorsFilter(
        Inner(), cors(allow_origins=["https://app.example"], allow_methods=["GET", "POST"])
    )
    response = await drive(stage, "OPTIONS", headers=preflight(method=b"DELETE"))
    assert response.status == 204
    assert response.header(b"access-control-allow-methods") == b"GET, POST"


async def test_wildcard_methods_echo_the_requested_method():
    stage = CorsFilter(Inner(), cors(allow_origins=["*"], allow_methods=["*"]))
    response = await drive(stage, "OPTIONS", headers=preflight(method=b"PATCH"))
    assert response.header(b"access-control-allow-methods") == b"PATCH"


async def test_any_origin_without_credentials_is_answered_with_a_star():
    stage = CorsFilter(Inner(), cors(allow_origins=["*"]))
    response = await drive(stage, "OPTIONS", headers=preflight(origin=b"https://any.example"))
    assert response.header(b"access-control-allow-origin") == b"*"
    assert response.header(b"access-control-allow-credentials") is None


async def test_any_origin_with_credentials_echoes_the_origin():
    stage = CorsFilter(Inner(), cors(allow_origins=["*"], allow_credentials=True))
    response = await drive(stage, "OPTIONS", headers=preflight(origin=b"https://any.example"))
    assert response.header(b"access-control-allow-origin") == b"https://any.example"
    assert response.header(b"access-control-allow-credentials") == b"true"


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (b"authorization, mcp-protocol-version", b"authorization, mcp-protocol-version"),
        (None, None),  # nothing requested: no Access-Control-Allow-Headers at all
    ],
)
async def test_wildcard_headers_echo_what_the_browser_asks_for(requested, expected):
    stage = CorsFilter(Inner(), cors(allow_origins=["*"], allow_headers=["*"]))
    response = await drive(stage, "OPTIONS", headers=preflight(requested=requested))
    assert response.status == 204
    assert response.header(b"access-control-allow-headers") == expected


async def test_preflight_from_an_unlisted_origin_is_refused_403_as_json():
    inner = Inner()
    stage = CorsFilter(inner, cors(allow_origins=["https://app.example"], allow_credentials=True))
    response = await drive(
        stage, "OPTIONS", headers=preflight(origin=b"https://evil.example"), inner=inner
    )
    assert not response.reached
    assert response.status == 403
    assert response.json() == {
        "error": "cors_forbidden",
        "error_description": "origin https://evil.example is not in the route's CORS allowOrigins",
    }
    assert response.header(b"vary") == b"Origin"
    assert not [k for k, _ in response.headers if k.startswith(b"access-control-")]


@pytest.mark.parametrize(
    "origin",
    [
        b"http://app.example",  # another scheme
        b"https://app.example:8443",  # another port
        b"https://APP.example",  # browsers send hosts in lowercase: this is not the listed origin
        b"https://app.example.evil.example",
        b"null",
    ],
)
async def test_only_the_exact_listed_origin_is_allowed(origin):
    stage = CorsFilter(Inner(), cors(allow_origins=["https://app.example"]))
    response = await drive(stage, "OPTIONS", headers=preflight(origin=origin))
    assert response.status == 403


# --- everything else: passed on, CORS headers added on the way back -----------------------------


async def test_without_an_origin_the_request_and_response_pass_untouched():
    inner = Inner(headers=[(b"content-type", b"application/json"), (b"x-backend", b"1")])
    stage = CorsFilter(inner, cors(allow_origins=["*"], allow_credentials=True))
    response = await drive(
        stage, "POST", headers=[(b"content-type", b"application/json")], body=b"{}", inner=inner
    )
    assert response.reached
    assert response.headers == [(b"content-type", b"application/json"), (b"x-backend", b"1")]
    assert inner.last.body == b"{}"


async def test_options_without_a_requested_method_is_not_a_preflight():
    inner = Inner(status=200)
    stage = CorsFilter(inner, cors(allow_origins=["https://app.example"]))
    response = await drive(stage, "OPTIONS", headers=[(b"origin", APP)], inner=inner)
    assert response.reached
    assert response.status == 200
    assert response.header(b"access-control-allow-origin") == APP
    assert response.header(b"access-control-allow-methods") is None


async def test_an_answer_from_inside_keeps_its_own_headers_and_gains_the_cors_ones():
    challenge = b'Bearer resource_metadata="http://gw.test/.well-known/x"'
    inner = Inner(
        status=401,
        headers=[(b"content-type", b"application/json"), (b"www-authenticate", challenge)],
        body=b'{"error": "invalid_token"}',
    )
    stage = CorsFilter(
        inner,
        cors(
            allow_origins=["https://app.example"],
            allow_credentials=True,
            expose_headers=["Mcp-Session-Id", "WWW-Authenticate"],
        ),
    )
    response = await drive(stage, "POST", headers=[(b"origin", APP)], inner=inner)
    assert response.status == 401
    assert response.body == b'{"error": "invalid_token"}'
    assert response.headers == [
        (b"content-type", b"application/json"),
        (b"www-authenticate", challenge),
        (b"access-control-allow-origin", APP),
        (b"access-control-allow-credentials", b"true"),
        (b"access-control-expose-headers", b"Mcp-Session-Id, WWW-Authenticate"),
        VARY,
    ]
    # The request went in as it came: the Origin header is still there for the stages inside.
    assert inner.last.header(b"origin") == APP


async def test_an_unlisted_origin_is_served_but_granted_nothing():
    # Refusing to read the answer is the browser's job: the filter only withholds the grant.
    inner = Inner(status=200)
    stage = CorsFilter(
        inner,
        cors(
            allow_origins=["https://app.example"],
            allow_credentials=True,
            expose_headers=["Mcp-Session-Id"],
        ),
    )
    response = await drive(
        stage, "POST", headers=[(b"origin", b"https://evil.example")], inner=inner
    )
    assert response.reached
    assert response.status == 200
    assert response.headers == [(b"content-type", b"application/json"), VARY]


async def test_a_streamed_answer_gets_the_headers_once_and_every_chunk_unchanged():
    inner = Inner.sse([b"data: 1\n\n", b"data: 2\n\n"])
    stage = CorsFilter(inner, cors(allow_origins=["*"]))
    response = await drive(stage, "GET", headers=[(b"origin", APP)], inner=inner)
    assert response.header(b"access-control-allow-origin") == b"*"
    assert response.chunks == [b"data: 1\n\n", b"data: 2\n\n", b""]


# --- DPoP: what a browser's DPoP client sends and reads ---------------------------------------


@pytest.mark.parametrize(
    ("allow", "expose", "allowed", "exposed"),
    [
        ([], [], "DPoP", "WWW-Authenticate, DPoP-Nonce"),
        (
            ["Authorization", "Content-Type"],
            ["Mcp-Session-Id"],
            "Authorization, Content-Type, DPoP",
            "Mcp-Session-Id, WWW-Authenticate, DPoP-Nonce",
        ),
        # Listed already, in any case: not twice.
        (["dpop"], ["www-authenticate", "Dpop-Nonce"], "dpop", "www-authenticate, Dpop-Nonce"),
        # `*` already allows every request header.
        (["*"], [], "*", "WWW-Authenticate, DPoP-Nonce"),
    ],
)
def test_with_dpop_lets_browsers_send_a_proof_and_read_the_challenge_and_nonce(
    allow, expose, allowed, exposed
):
    settings = with_dpop(cors(allow_headers=allow, expose_headers=expose))
    assert (settings.allow_headers, settings.expose_headers) == (allowed, exposed)


async def test_a_dpop_route_exposes_its_challenge_and_nonce_to_the_page():
    inner = Inner(status=401, headers=[(b"dpop-nonce", b"n1")])
    stage = CorsFilter(inner, with_dpop(cors(allow_origins=["https://app.example"])))
    answer = await drive(stage, "POST", headers=[(b"origin", APP)], inner=inner)
    assert answer.header(b"access-control-expose-headers") == b"WWW-Authenticate, DPoP-Nonce"
    asked = await drive(stage, "OPTIONS", headers=preflight(requested=b"authorization, dpop"))
    assert asked.header(b"access-control-allow-headers") == b"DPoP"
