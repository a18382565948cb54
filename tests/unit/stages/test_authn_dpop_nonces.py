"""DPoP at the JWT authentication stage, continued: server nonces (`requireNonce`, RFC 9449 §9),
the replay cache failing closed (503, never a proof accepted unrecorded), and the request URL a
proof must name: scheme and host as the client used them (through trusted forwarded headers
only), the path as received, no query."""

from __future__ import annotations

from mcp_oauth_gateway.asgi import TRUST_FORWARDED_KEY
from mcp_oauth_gateway.controlplane.jwks import InlineKeyset
from mcp_oauth_gateway.dataplane.authn import JwtAuthentication
from mcp_oauth_gateway.dataplane.dpop_binding import ProofCheck
from mcp_oauth_gateway.dpop import DpopNonces, MemoryReplayCache
from mcp_oauth_gateway.redis_clients import RedisUnavailable
from unit.tokens_support import KEYSET, compiled_mcp

from .dpop_requests import NONCE_SECRET, Clock, bound_token, dpop, proof, provider, stage
from .harness import Inner, Response, drive, values

TOKEN = bound_token()
CONTEXT = "resource-server default/policy"


def nonce_of(response: Response) -> str:
    found = values(response.headers, b"dpop-nonce")
    assert len(found) == 1, response.headers
    return found[0].decode()


# --- nonces -----------------------------------------------------------------------------------


async def test_a_proof_without_a_nonce_gets_one_and_the_retry_with_it_passes():
    authn = stage(Inner(), provider(require_nonce=True))
    first = await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN)))
    assert first.status == 401
    assert first.json()["error"] == "use_dpop_nonce"
    challenge = values(first.headers, b"www-authenticate")[1]
    assert challenge.startswith(b'DPoP error="use_dpop_nonce"')
    nonce = nonce_of(first)
    retry = await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN, nonce=nonce)))
    assert retry.status == 200
    assert values(retry.headers, b"dpop-nonce") == []  # still the current one: nothing new


async def test_a_nonce_of_another_server_or_a_made_up_one_is_refused():
    authn = stage(Inner(), provider(require_nonce=True))
    elsewhere = DpopNonces(NONCE_SECRET, 300.0, context="resource-server other/policy")
    for nonce in (elsewhere.issue(Clock().now), "A" * 32, "x"):
        response = await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN, nonce=nonce)))
        assert response.json()["error"] == "use_dpop_nonce", nonce
        assert nonce_of(response) != nonce


async def test_a_nonce_expires_after_two_periods_and_the_last_one_is_renewed_on_success():
    clock = Clock()
    authn = stage(Inner(), provider(require_nonce=True, max_age=60.0), clock=clock)
    nonce = nonce_of(await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN))))
    # The next period: still accepted, and the answer carries the new one (RFC 9449 §8.2).
    clock.now += 60
    later = await drive(
        authn, "POST", headers=dpop(TOKEN, proof(TOKEN, nonce=nonce, iat=int(clock.now)))
    )
    assert later.status == 200
    renewed = nonce_of(later)
    assert renewed != nonce
    # Two periods on: refused, with a fresh one.
    clock.now += 60
    stale = await drive(
        authn, "POST", headers=dpop(TOKEN, proof(TOKEN, nonce=nonce, iat=int(clock.now)))
    )
    assert stale.json()["error"] == "use_dpop_nonce"
    assert "stale" in stale.json()["error_description"]


async def test_nonces_are_asked_for_even_in_permissive_mode():
    inner = Inner()
    authn = stage(inner, provider(require_nonce=True), mode="Permissive")
    response = await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN)), inner=inner)
    assert response.status == 401
    assert not response.reached
    assert response.json()["error"] == "use_dpop_nonce"


async def test_a_used_nonce_does_not_make_a_replayed_proof_acceptable():
    authn = stage(Inner(), provider(require_nonce=True))
    nonce = nonce_of(await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN))))
    once = proof(TOKEN, nonce=nonce)
    assert (await drive(authn, "POST", headers=dpop(TOKEN, once))).status == 200
    again = await drive(authn, "POST", headers=dpop(TOKEN, once))
    assert again.json()["error"] == "invalid_dpop_proof"


async def test_without_require_nonce_no_nonce_is_asked_for_or_given():
    response = await drive(stage(Inner()), "POST", headers=dpop(TOKEN, proof(TOKEN)))
    assert response.status == 200
    assert values(response.headers, b"dpop-nonce") == []


# --- the replay cache fails closed ------------------------------------------------------------


async def test_a_full_replay_cache_answers_503_and_accepts_nothing_unrecorded():
    inner = Inner()
    full = MemoryReplayCache(max_entries=1)
    authn = stage(inner, replay=full)
    assert (await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN)))).status == 200
    response = await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN)), inner=inner)
    assert response.status == 503
    assert not response.reached
    assert response.json()["error"] == "temporarily_unavailable"
    assert int(response.header(b"retry-after") or b"0") >= 1


class DownCache:
    """A replay cache whose Redis does not answer."""

    async def first_use(self, key: str, ttl: float) -> bool:
        raise RedisUnavailable("redis://:secret@10.0.0.9:6379", "did not answer: timeout")


async def test_an_unavailable_redis_answers_503_without_naming_it():
    inner = Inner()
    response = await drive(
        stage(inner, replay=DownCache()), "POST", headers=dpop(TOKEN, proof(TOKEN)), inner=inner
    )
    assert response.status == 503
    assert not response.reached
    assert response.header(b"retry-after") == b"2"
    assert b"10.0.0.9" not in response.body
    assert b"secret" not in response.body


async def test_an_unavailable_nonce_key_answers_503():
    async def down() -> bytes:
        raise RedisUnavailable("redis://10.0.0.9:6379", "did not answer")

    chosen = provider(require_nonce=True)
    check = ProofCheck([chosen.dpop], MemoryReplayCache, down, CONTEXT, Clock())
    authn = JwtAuthentication(
        Inner(), [(chosen, InlineKeyset(KEYSET))], compiled_mcp(None), False, proofs=check
    )
    response = await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN)))
    assert response.status == 503


# --- the URL a proof names --------------------------------------------------------------------


async def test_behind_a_trusted_proxy_the_proof_names_the_url_the_client_used():
    forwarded = [(b"x-forwarded-proto", b"https"), (b"x-forwarded-host", b"mcp.example")]
    public = "https://mcp.example/mcp"
    trusted = await drive(
        stage(Inner()),
        "POST",
        headers=[*forwarded, *dpop(TOKEN, proof(TOKEN, htu=public))],
        scope={TRUST_FORWARDED_KEY: True},
    )
    assert trusted.status == 200
    # The same headers from a client the listener does not trust name nothing: a proof for
    # the URL they claim is for another server.
    untrusted = await drive(
        stage(Inner()), "POST", headers=[*forwarded, *dpop(TOKEN, proof(TOKEN, htu=public))]
    )
    assert untrusted.json()["error"] == "invalid_dpop_proof"
    assert "this request is to http://gw.test/mcp" in untrusted.json()["error_description"]


async def test_the_path_is_the_one_received_and_the_query_is_left_out():
    raw = b"/mcp/a%2Fb"
    scope = {"raw_path": raw, "path": "/mcp/a/b"}
    authn = stage(Inner())
    as_sent = proof(TOKEN, htu="http://gw.test/mcp/a%2fb?x=1")
    ok = await drive(
        authn, "POST", "/mcp/a/b", query=b"x=1", headers=dpop(TOKEN, as_sent), scope=scope
    )
    assert ok.status == 200, ok.body
    decoded = proof(TOKEN, htu="http://gw.test/mcp/a/b")
    other = await drive(authn, "POST", "/mcp/a/b", headers=dpop(TOKEN, decoded), scope=scope)
    assert other.json()["error"] == "invalid_dpop_proof"


async def test_a_host_header_that_makes_no_url_is_refused():
    response = await drive(
        stage(Inner()), "POST", host=b"gw.test/evil?", headers=dpop(TOKEN, proof(TOKEN))
    )
    assert response.status == 401
    assert response.json()["error"] == "invalid_dpop_proof"
