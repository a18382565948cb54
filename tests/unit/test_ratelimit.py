from __future__ import annotations

import httpx

from mcp_oauth_gateway.asgi import CLAIMS_KEY
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.snapshot import CompiledRateLimit
from mcp_oauth_gateway.dataplane.ratelimit import LocalLimiter, RateLimit


async def test_token_bucket_arithmetic():
    limiter = LocalLimiter(capacity=2, per_second=0.5)
    assert await limiter.take("a") == 0
    assert await limiter.take("a") == 0
    wait = await limiter.take("a")
    assert 1.9 < wait <= 2.0  # one token takes 2 s at 0.5/s
    assert await limiter.take("b") == 0


class Broken:
    async def take(self, key: str) -> float:
        raise ConnectionError("redis is down")


async def test_an_unavailable_limiter_fails_closed():
    async def backend(scope, receive, send):
        raise AssertionError("must not be reached")

    limit = CompiledRateLimit(compile_expression("jwt.sub"), 5, 1.0, "redis://x")
    stage = RateLimit(backend, limit, Broken(), "default/p")

    async def app(scope, receive, send):
        scope[CLAIMS_KEY] = {"sub": "alice"}
        await stage(scope, receive, send)

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw"
    ) as client:
        response = await client.get("/mcp")
    assert response.status_code == 503
    assert response.json()["error"] == "temporarily_unavailable"
