"""The rate-limit stage (`dataplane/ratelimit.py`) on its own: the key it computes for a caller
(the expression's value with its token's issuer), the 429 with `Retry-After` it answers once the
bucket is empty, and the stage in front of the in-process token bucket.

Covered elsewhere, not repeated: the token-bucket arithmetic of `LocalLimiter` and the 503 when
the limiter cannot answer (`tests/unit/test_ratelimit.py`); Redis-shared buckets
(`tests/e2e/test_rate_limit.py`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.policies import compile_rate_limit
from mcp_oauth_gateway.controlplane.snapshot import CompiledRateLimit
from mcp_oauth_gateway.dataplane.metrics import Metrics
from mcp_oauth_gateway.dataplane.ratelimit import LocalLimiter, RateLimit
from mcp_oauth_gateway.resources.models import RateLimitSpec

from .harness import Inner, count_calls, drive


class Scripted:
    """A limiter answering the waits it is given, in order, and recording the keys it saw."""

    def __init__(self, *waits: float):
        self.waits = list(waits)
        self.keys: list[str] = []

    async def take(self, key: str) -> float:
        self.keys.append(key)
        return self.waits.pop(0) if self.waits else 0.0


ISS = "http://idp/"
ALICE = {"iss": ISS, "sub": "alice"}


def limit(key: str = "jwt.sub") -> CompiledRateLimit:
    return CompiledRateLimit(compile_expression(key), 10, 1.0, None)


async def test_a_caller_with_tokens_left_goes_inward_untouched():
    inner, limiter = Inner(), Scripted(0.0)
    response = await drive(
        RateLimit(inner, limit(), limiter, "default/p"),
        "POST",
        body=b"{}",
        scope={CLAIMS_KEY: ALICE},
        inner=inner,
    )
    assert response.reached
    assert response.status == 200
    assert limiter.keys == ['["http://idp/","alice"]']
    assert inner.last.body == b"{}"
    assert inner.last.headers == [(b"host", b"gw.test")]


@pytest.mark.parametrize(("wait", "seconds"), [(2.5, b"3"), (0.2, b"1"), (59.01, b"60")])
async def test_an_empty_bucket_is_429_with_retry_after_in_whole_seconds(wait, seconds):
    inner = Inner()
    response = await drive(
        RateLimit(inner, limit(), Scripted(wait), "default/p"),
        "POST",
        scope={CLAIMS_KEY: ALICE},
        inner=inner,
    )
    assert not response.reached
    assert response.status == 429
    assert response.header(b"retry-after") == seconds
    assert response.json() == {
        "error": "rate_limited",
        "error_description": f"too many requests for this caller; retry in {seconds.decode()} s",
    }


@pytest.mark.parametrize(
    ("claims", "key"),
    [
        (ALICE, '["http://idp/","alice"]'),
        ({"iss": ISS, "sub": 42}, '["http://idp/","42"]'),
        ({"iss": "http://other/", "sub": "alice"}, '["http://other/","alice"]'),
        ({"iss": ISS, "sub": "-"}, '["http://idp/","-"]'),  # never the anonymous bucket
        ({"sub": "alice"}, '[null,"alice"]'),
        ({}, "-"),  # no such claim: every such caller shares the anonymous bucket
        ({"iss": ISS}, "-"),
        ({"iss": ISS, "sub": ""}, "-"),
        ({"iss": ISS, "sub": ["alice", "bob"]}, "-"),  # not a string or an integer
        ({"iss": ISS, "sub": 1.5}, "-"),
    ],
    ids=[
        "alice",
        "integer",
        "other-issuer",
        "dash-is-not-anonymous",
        "no-issuer",
        "no-claims",
        "no-sub",
        "empty-sub",
        "list-sub",
        "float-sub",
    ],
)
async def test_the_key_is_the_issuer_and_the_value_or_the_shared_anonymous_bucket(claims, key):
    limiter = Scripted()
    await drive(RateLimit(Inner(), limit(), limiter, "default/p"), scope={CLAIMS_KEY: claims})
    assert limiter.keys == [key]


async def test_without_claims_in_the_scope_everyone_is_anonymous():
    limiter = Scripted()
    await drive(RateLimit(Inner(), limit(), limiter, "default/p"))
    assert limiter.keys == ["-"]


async def test_a_key_may_read_the_request():
    limiter = Scripted()
    stage = RateLimit(
        Inner(), limit('request.headers["x-api-key"] + ":" + request.method'), limiter, "default/p"
    )
    await drive(stage, "POST", headers=[(b"x-api-key", b"k-123")])
    await drive(stage, "GET")  # no such header: the key cannot be computed
    await drive(stage, "POST", headers=[(b"x-api-key", b"k-123")], scope={CLAIMS_KEY: ALICE})
    assert limiter.keys == ['[null,"k-123:POST"]', "-", '["http://idp/","k-123:POST"]']


async def test_rejections_are_counted_for_the_policy():
    metrics = Metrics()
    stage = RateLimit(Inner(), limit(), Scripted(0.0, 1.0, 1.0), "default/p", metrics)
    statuses = [(await drive(stage, scope={CLAIMS_KEY: ALICE})).status for _ in range(3)]
    assert statuses == [200, 429, 429]
    assert metrics.rejections == {"default/p": 2}


async def test_in_front_of_the_local_bucket_each_caller_gets_its_own_allowance(monkeypatch):
    from mcp_oauth_gateway.dataplane import ratelimit as module

    # The bucket's clock stands still: Retry-After is the 30 s a token takes to come back
    # (2 a minute), less the time the three requests took; a second spent on them (a loaded
    # machine) would make it 29. Only the limiter's clock: the event loop keeps its own.
    monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: 1000.0))
    compiled = compile_rate_limit(RateLimitSpec(key="jwt.sub", requests=2, window="1m"), [])
    assert compiled is not None
    stage = RateLimit(
        Inner(), compiled, LocalLimiter(compiled.capacity, compiled.per_second), "default/p"
    )

    async def status(sub: str) -> tuple[int, bytes | None]:
        response = await drive(stage, scope={CLAIMS_KEY: {"iss": ISS, "sub": sub}})
        return response.status, response.header(b"retry-after")

    assert [await status("alice") for _ in range(3)] == [(200, None), (200, None), (429, b"30")]
    assert await status("bob") == (200, None)


async def test_alice_at_one_provider_never_spends_alice_at_another_providers_allowance():
    """`sub` is unique only within its issuer: two providers' alices are two callers."""
    compiled = compile_rate_limit(RateLimitSpec(key="jwt.sub", requests=2, window="1m"), [])
    assert compiled is not None
    stage = RateLimit(
        Inner(), compiled, LocalLimiter(compiled.capacity, compiled.per_second), "default/p"
    )
    first = {CLAIMS_KEY: ALICE, TOKEN_KEY: "token-of-alice-at-idp"}
    second = {CLAIMS_KEY: {"iss": "http://other/", "sub": "alice"}, TOKEN_KEY: "token-at-other"}
    assert [(await drive(stage, scope=first)).status for _ in range(3)] == [200, 200, 429]
    assert [(await drive(stage, scope=second)).status for _ in range(3)] == [200, 200, 429]


async def test_the_key_over_the_claims_is_computed_once_per_token(monkeypatch):
    from mcp_oauth_gateway.dataplane import ratelimit as module

    evaluations = count_calls(monkeypatch, module, "value_of")
    limiter = Scripted()
    stage = RateLimit(Inner(), limit(), limiter, "default/p")
    alice = {CLAIMS_KEY: ALICE, TOKEN_KEY: "token-a"}
    bob = {CLAIMS_KEY: {"iss": ISS, "sub": "bob"}, TOKEN_KEY: "token-b"}
    for scope in (alice, alice, bob, alice):
        await drive(stage, scope=scope)
    a, b = '["http://idp/","alice"]', '["http://idp/","bob"]'
    assert limiter.keys == [a, a, b, a]
    assert evaluations[0] == 2
    by_path = RateLimit(Inner(), limit("request.path"), Scripted(), "default/p")
    for _ in range(2):
        await drive(by_path, scope=alice)
    assert evaluations[0] == 4
