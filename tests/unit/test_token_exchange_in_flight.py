"""Requests of one caller that arrive while its token is being exchanged wait for that exchange:
one exchange at the provider, one token for all of them, a refusal for all of them, and a
request that goes away leaves the exchange to the others. Before, each request that found no
cached token made its own exchange, so an MCP client's GET stream and POST arriving together
(at the start of a session, or when the cached token nears its expiry) cost two exchanges and
gave the backend two tokens for one session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from mcp_oauth_gateway.controlplane.snapshot import CompiledTokenExchange
from mcp_oauth_gateway.dataplane.token_exchange import ExchangeError, TokenExchanger

SPEC = CompiledTokenExchange("gateway-exchange", "secret", "mcp-backend", None, None)
ISSUER = "http://idp/realms/r"


class Discovery:
    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    async def get(self) -> dict[str, object]:
        return {"token_endpoint": self.endpoint}


@dataclass
class Endpoint:
    """A token endpoint that answers each request only once `release` is set."""

    url: str
    session: aiohttp.ClientSession
    requests: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    status: int = 200

    def exchanger(self, counted: list[str]) -> TokenExchanger:
        providers = {ISSUER: (Discovery(self.url), lambda: 1)}
        return TokenExchanger(SPEC, providers, lambda: self.session, counted.append)  # type: ignore[arg-type]


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    state: list[Endpoint] = []

    async def token(request: web.Request) -> web.Response:
        ep = state[0]
        ep.requests += 1
        ep.arrived.set()
        await ep.release.wait()
        if ep.status != 200:
            return web.json_response({"error": "invalid_request"}, status=ep.status)
        return web.json_response({"access_token": f"x-{ep.requests}", "expires_in": 300})

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    session = aiohttp.ClientSession()
    state.append(Endpoint(f"http://127.0.0.1:{runner.addresses[0][1]}/token", session))
    yield state[0]
    await session.close()
    await runner.cleanup()


async def test_requests_arriving_together_share_one_exchange(endpoint):
    counted: list[str] = []
    ex = endpoint.exchanger(counted)
    calls = [asyncio.create_task(ex.token_for("caller", ISSUER)) for _ in range(3)]
    await endpoint.arrived.wait()
    endpoint.release.set()
    assert await asyncio.gather(*calls) == ["x-1"] * 3
    assert endpoint.requests == 1
    assert sorted(counted) == ["cache_hit", "cache_hit", "exchanged"]
    assert await ex.token_for("caller", ISSUER) == "x-1"  # and the cache has it


async def test_a_refusal_reaches_every_request_waiting_for_it(endpoint):
    counted: list[str] = []
    ex = endpoint.exchanger(counted)
    endpoint.status = 400
    calls = [asyncio.create_task(ex.token_for("caller", ISSUER)) for _ in range(2)]
    await endpoint.arrived.wait()
    endpoint.release.set()
    answers = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(a, ExchangeError) and a.status == 502 for a in answers), answers
    assert endpoint.requests == 1
    assert counted == ["refused"]  # counted and logged once
    endpoint.status = 200
    assert await ex.token_for("caller", ISSUER) == "x-2"  # a refusal is not kept


async def test_a_request_that_goes_away_leaves_the_exchange_to_the_others(endpoint):
    ex = endpoint.exchanger([])
    first = asyncio.create_task(ex.token_for("caller", ISSUER))
    await endpoint.arrived.wait()
    second = asyncio.create_task(ex.token_for("caller", ISSUER))
    await asyncio.sleep(0)  # the second is waiting for the first's exchange
    first.cancel()
    endpoint.release.set()
    assert await second == "x-1"
    assert first.cancelled()
    assert endpoint.requests == 1
