"""The verified-token cache and the authorization memo as a shared gateway needs them: sized by
`--token-cache-entries`, the least recently used entry forgotten first (a hot token stays while
others pass through), entries dying at `exp` and on key rotation, and every hit, miss, eviction
and entry counted for /metrics."""

from __future__ import annotations

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.jwks import InlineKeyset
from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.controlplane.snapshot import (
    CompiledAuthorization,
    CompiledProvider,
    KeysetSource,
)
from mcp_oauth_gateway.dataplane import authn as authn_module
from mcp_oauth_gateway.dataplane.authn import JwtAuthentication
from mcp_oauth_gateway.dataplane.authz import CelAuthorization
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization
from mcp_oauth_gateway.dataplane.metrics import Metrics
from support import jwks_of, mint, new_key
from unit.tokens_support import ISSUER, KEY, KEYSET, bearer, compiled_mcp, good

from .harness import Inner, drive

now = authn_module.time.time

PROVIDER = CompiledProvider(
    ISSUER,
    frozenset({"mcp-public"}),
    KeysetSource("inline", 0.0),
    "http://idp/.well-known/openid-configuration",
)


class Holder:
    """A keyset holder the test rotates by hand."""

    url = "http://idp/jwks"

    def __init__(self) -> None:
        self.keyset = KEYSET

    async def refetch_for_unknown_kid(self) -> bool:
        return False


def stage(metrics: Metrics, entries: int, keys: object = None) -> JwtAuthentication:
    return JwtAuthentication(
        Inner(),
        [(PROVIDER, keys or InlineKeyset(KEYSET))],  # type: ignore[list-item]
        compiled_mcp(None),
        False,
        metrics,
        "Strict",
        entries,
    )


def verified(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = authn_module.verify_token

    def counting(token, keyset, rules, now, parsed=None):
        calls.append(token)
        return real(token, keyset, rules, now, parsed)

    monkeypatch.setattr(authn_module, "verify_token", counting)
    return calls


async def test_a_hot_token_stays_while_tokens_seen_once_pass_through(monkeypatch):
    calls = verified(monkeypatch)
    metrics = Metrics()
    authn = stage(metrics, 2)
    hot = mint(KEY, good(sub="hot"))
    for n in range(4):
        for token in (hot, mint(KEY, good(sub=f"once-{n}"))):
            assert (await drive(authn, "POST", headers=[bearer(token)])).status == 200
    # First in, first out would have forgotten the hot token each time two others came in.
    assert calls.count(hot) == 1
    counts = metrics.token_cache
    assert (counts.hits, counts.misses, counts.evictions, counts.entries()) == (3, 5, 3, 2)


async def test_an_expired_entry_is_a_miss_and_verified_again(monkeypatch):
    calls = verified(monkeypatch)
    metrics = Metrics()
    authn = stage(metrics, 10)
    token = mint(KEY, good())
    assert (await drive(authn, "POST", headers=[bearer(token)])).status == 200
    later = authn_module.time.time() + 10 * 24 * 3600
    monkeypatch.setattr(authn_module.time, "time", lambda: later)
    response = await drive(authn, "POST", headers=[bearer(token)])
    assert response.status == 401
    assert response.json()["error_description"] == "token has expired"
    assert calls == [token, token]
    assert (metrics.token_cache.hits, metrics.token_cache.misses) == (0, 2)


async def test_an_entry_from_a_rotated_keyset_is_a_miss():
    metrics = Metrics()
    holder = Holder()
    authn = stage(metrics, 10, holder)
    token = mint(KEY, good())
    assert (await drive(authn, "POST", headers=[bearer(token)])).status == 200
    assert (await drive(authn, "POST", headers=[bearer(token)])).status == 200
    holder.keyset = parse_jwks(jwks_of(new_key("k2")), version=2)
    assert (await drive(authn, "POST", headers=[bearer(token)])).status == 401
    assert (metrics.token_cache.hits, metrics.token_cache.misses) == (1, 2)


def authz(metrics: Metrics, entries: int) -> CelAuthorization:
    rules = CompiledAuthorization("Allow", (compile_expression('jwt.sub != "mallory"'),))  # type: ignore[arg-type]
    return CelAuthorization(Inner(), rules, "default/p", None, entries, metrics.authorization_cache)


async def test_the_authorization_memo_counts_and_forgets_the_least_recently_used():
    metrics = Metrics()
    stage = authz(metrics, 3)

    def caller(sub: str) -> dict[str, object]:
        return {CLAIMS_KEY: {"sub": sub}, TOKEN_KEY: f"token-of-{sub}"}

    for sub in ("alice", "alice", "bob", "alice"):
        assert (await drive(stage, "POST", scope=caller(sub))).status == 200
    counts = metrics.authorization_cache
    # Each decision is remembered by token and by claim values: bob's two entries make room by
    # forgetting alice's claim values, not her token, used more recently.
    assert (counts.hits, counts.misses, counts.evictions, counts.entries()) == (2, 2, 1, 3)


async def test_the_counters_are_exported_for_prometheus():
    metrics = Metrics()
    authn = stage(metrics, 1)
    # b's token minted once and sent twice: minted twice, a second boundary between the two
    # (iat and exp are whole seconds) made two tokens, and a miss where a hit was counted.
    tokens = {sub: mint(KEY, good(sub=sub)) for sub in ("a", "b")}
    for sub in ("a", "b", "b"):
        await drive(authn, "POST", headers=[bearer(tokens[sub])])
    text = metrics.render().decode()
    # The same token again: verified once.
    assert "mcp_gateway_token_cache_hits_total 1.0" in text
    assert "mcp_gateway_token_cache_misses_total 2.0" in text
    assert "mcp_gateway_token_cache_evictions_total 1.0" in text
    assert "mcp_gateway_token_cache_entries 1.0" in text
    assert "mcp_gateway_authorization_cache_hits_total 0.0" in text
    assert "mcp_gateway_authorization_cache_entries 0.0" in text


async def test_expired_entries_leave_as_new_tokens_come(monkeypatch):
    metrics = Metrics()
    authn = stage(metrics, 10)
    for sub in ("a", "b"):
        await drive(authn, "POST", headers=[bearer(mint(KEY, good(sub=sub, exp=int(now()) + 5)))])
    assert metrics.token_cache.entries() == 2
    later = now() + 3600
    monkeypatch.setattr(authn_module.time, "time", lambda: later)
    for sub in ("c", "d"):
        fresh = good(sub=sub, iat=int(later), exp=int(later) + 600)
        assert (await drive(authn, "POST", headers=[bearer(mint(KEY, fresh))])).status == 200
    # Each new token made room by dropping the oldest entry, dead since its exp: no eviction.
    assert (metrics.token_cache.entries(), metrics.token_cache.evictions) == (2, 0)


def test_tool_decisions_are_remembered_per_token_and_item_and_counted():
    metrics = Metrics()
    rules = CompiledAuthorization(
        "Allow", (compile_expression('mcp.tool.name == "echo"', mcp=True),)
    )
    tools = McpAuthorization(
        Inner(), rules, 1 << 20, None, None, (), 2, metrics.authorization_cache
    )

    def caller(sub: str) -> dict[str, object]:
        return {CLAIMS_KEY: {"sub": sub}, TOKEN_KEY: f"token-of-{sub}"}

    asked = [
        ("alice", "echo"),
        ("alice", "echo"),
        ("bob", "rm"),
        ("alice", "echo"),
        ("carol", "echo"),
    ]
    answers = [tools.allowed(caller(sub), "tool", name) for sub, name in asked]
    assert answers == [True, True, False, True, True]
    counts = metrics.authorization_cache
    # carol's entry made room by forgetting bob's, the least recently used, not alice's.
    assert (counts.hits, counts.misses, counts.evictions, counts.entries()) == (2, 3, 1, 2)
    assert tools.allowed(caller("alice"), "tool", "echo")
    assert counts.hits == 3
