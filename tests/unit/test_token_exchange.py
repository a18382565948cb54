"""The token exchanger (`dataplane/token_exchange.py`) against a token endpoint on loopback that
answers as RFC 8693 says (it stands in for a provider; the providers' own behaviour is tested
end to end against the dev IdP): the request it sends, one exchange per caller token until
shortly before expiry, a new one when the caller's keyset changes, and refusals and failures
reported with the reason, never answered with the caller's token."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web

from mcp_oauth_gateway.controlplane.snapshot import CompiledTokenExchange
from mcp_oauth_gateway.dataplane.token_exchange import (
    EXPIRY_MARGIN,
    ExchangeError,
    TokenExchanger,
    basic_auth,
    exchange_form,
    read_answer,
)

SPEC = CompiledTokenExchange("gw exchange", "s3cr&t", "mcp-backend", None, "mcp:tools")
ISSUER = "http://idp/realms/r"


class Discovery:
    def __init__(self, document: dict[str, object]):
        self.document = document

    async def get(self) -> dict[str, object]:
        return self.document


@pytest.fixture
async def provider():
    """A token endpoint recording each request; `answers` says what it replies next."""
    seen: list[dict] = []
    answers: list[tuple[int, dict]] = []

    async def token(request: web.Request) -> web.Response:
        form = {k: v[0] for k, v in parse_qs(await request.text()).items()}
        seen.append({"form": form, "authorization": request.headers.get("Authorization")})
        status, body = (
            answers.pop(0)
            if answers
            else (200, {"access_token": f"x-{len(seen)}", "expires_in": 300})
        )
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    session = aiohttp.ClientSession()
    yield f"http://127.0.0.1:{port}/token", session, seen, answers
    await session.close()
    await runner.cleanup()


def exchanger(provider, version: list[int]) -> tuple[TokenExchanger, list[str]]:
    endpoint, session, _, _ = provider
    counted: list[str] = []
    providers = {ISSUER: (Discovery({"token_endpoint": endpoint}), lambda: version[0])}
    return TokenExchanger(SPEC, providers, lambda: session, counted.append), counted  # type: ignore[arg-type]


def test_the_request_is_rfc_8693_with_the_client_authenticated_by_basic():
    form = exchange_form(SPEC, "caller")
    assert form == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": "caller",
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "audience": "mcp-backend",
        "scope": "mcp:tools",
    }
    # RFC 6749 §2.3.1: form-encoded before base64, so a ':' or '&' in either part survives.
    decoded = base64.b64decode(basic_auth("gw exchange", "s3cr&t").removeprefix("Basic "))
    assert decoded == b"gw%20exchange:s3cr%26t"


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (
            400,
            b'{"error":"invalid_request","error_description":"Client not allowed to exchange"}',
            "refused:invalid_request",
        ),
        (403, b'{"error":"access_denied"}', "refused:access_denied"),
        (200, b'{"token_type":"Bearer"}', "malformed"),
        (200, b"not json", "malformed"),
    ],
)
def test_answers_without_a_token_are_errors_with_the_reason(status, body, reason):
    with pytest.raises(ExchangeError) as caught:
        read_answer(status, body)
    assert caught.value.reason == reason
    assert caught.value.status == 502


async def test_one_exchange_serves_a_caller_until_shortly_before_it_expires(provider):
    _, _, seen, _ = provider
    version = [1]
    ex, counted = exchanger(provider, version)
    tokens = [await ex.token_for("caller-a", ISSUER) for _ in range(5)]
    assert tokens == ["x-1"] * 5
    assert len(seen) == 1
    assert seen[0]["form"]["subject_token"] == "caller-a"
    assert seen[0]["authorization"] == basic_auth("gw exchange", "s3cr&t")
    assert counted == ["exchanged"] + ["cache_hit"] * 4
    assert await ex.token_for("caller-b", ISSUER) == "x-2"  # another caller: its own
    version[0] = 2  # the caller's keyset changed: cached tokens are not trusted any more
    assert await ex.token_for("caller-a", ISSUER) == "x-3"


async def test_a_token_about_to_expire_is_exchanged_again(provider):
    _, _, seen, answers = provider
    answers.append((200, {"access_token": "short", "expires_in": EXPIRY_MARGIN}))
    ex, _ = exchanger(provider, [1])
    assert await ex.token_for("caller", ISSUER) == "short"
    assert await ex.token_for("caller", ISSUER) == "x-2"
    assert len(seen) == 2


async def test_a_refusal_is_an_error_naming_it_and_is_not_cached(provider):
    _, _, _, answers = provider
    answers.append(
        (
            400,
            {
                "error": "invalid_request",
                "error_description": "Requested audience not available: mcp-backend",
            },
        )
    )
    ex, counted = exchanger(provider, [1])
    with pytest.raises(ExchangeError) as caught:
        await ex.token_for("caller", ISSUER)
    assert caught.value.status == 502
    assert "Requested audience not available" in caught.value.description
    assert "caller" not in caught.value.description  # no token material in messages
    assert counted == ["refused"]
    assert await ex.token_for("caller", ISSUER) == "x-2"


async def test_a_failing_provider_is_503(provider):
    _, _, _, answers = provider
    answers.append((500, {"error": "server_error"}))
    ex, counted = exchanger(provider, [1])
    with pytest.raises(ExchangeError) as caught:
        await ex.token_for("caller", ISSUER)
    assert caught.value.status == 503
    assert counted == ["unreachable"]
