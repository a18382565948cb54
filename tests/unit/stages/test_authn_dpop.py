"""DPoP at the JWT authentication stage (RFC 9449 §7): a bound token is accepted only as
`Authorization: DPoP` with a proof signed by its key for this very request, once; the same
token as `Bearer` is refused whatever the mode; what `Allowed`, `Required` and `Disabled` do
with bound and unbound tokens; where the refusal's error goes (the challenge of the scheme
used); what reaches the backend; and that the verified-token cache never spares a proof.

The proof checks themselves are `tests/unit/dpop/`'s; here they are seen through the stage:
one refusal per class of attack, to show the stage asks the core for each request. Nonces,
the replay cache's failures and the request URL behind proxies: `test_authn_dpop_nonces.py`."""

from __future__ import annotations

import dataclasses

import pytest

from mcp_oauth_gateway.asgi import AUDIT_KEY, CLAIMS_KEY, DPOP_KEY, TOKEN_KEY
from mcp_oauth_gateway.audit import AuditRecord
from mcp_oauth_gateway.dpop import MemoryReplayCache
from mcp_oauth_gateway.provider_kinds import ProviderKind
from support import mint
from unit.dpop.dpop_support import HMAC_KEY, KEYS, OTHER_EC, header, public_jwk, rfc7638
from unit.tokens_support import ALL_DPOP_ALGS, KEY, bearer, good

from .dpop_requests import (
    JKT,
    URL,
    Clock,
    bound_token,
    dpop,
    plain_token,
    proof,
    provider,
    stage,
)
from .harness import Inner, Response, drive, values

PRM = "http://gw.test/.well-known/oauth-protected-resource/mcp"
TOKEN = bound_token()


def challenges(response: Response) -> list[bytes]:
    return values(response.headers, b"www-authenticate")


def refused(response: Response, code: str, words: str) -> None:
    """A 401 with `code` in the body, its description containing `words`."""
    assert response.status == 401, response.body
    assert response.json()["error"] == code, response.json()
    assert words in response.json()["error_description"], response.json()


def on_dpop_challenge(response: Response, code: str) -> None:
    """RFC 9449 §7.2: the error on the DPoP challenge, none on the Bearer one."""
    bearer_value, dpop_value = challenges(response)
    assert bearer_value == f'Bearer resource_metadata="{PRM}", scope="openid"'.encode()
    assert dpop_value.startswith(f'DPoP error="{code}", error_description="'.encode())
    assert f'resource_metadata="{PRM}"'.encode() in dpop_value


# --- a bound token with its proof -----------------------------------------------------------


async def test_a_bound_token_with_its_proof_goes_inward_without_the_proof_or_the_token():
    inner = Inner()
    record = AuditRecord()
    response = await drive(
        stage(inner),
        "POST",
        headers=[(b"accept", b"*/*"), *dpop(TOKEN, proof(TOKEN)), (b"x-after", b"1")],
        scope={AUDIT_KEY: record},
        inner=inner,
    )
    assert response.status == 200
    seen = inner.last
    # The CEL context's jwt.cnf is the token's claim as it is.
    assert seen.scope[CLAIMS_KEY]["cnf"] == {"jkt": JKT}
    assert seen.scope[TOKEN_KEY] == TOKEN
    assert seen.headers == [(b"host", b"gw.test"), (b"accept", b"*/*"), (b"x-after", b"1")]
    # The audit line says the call was DPoP-bound, and to which key.
    assert record.dpop_jkt == JKT
    # Later refusals (a scope) put their error on the DPoP challenge, offering these.
    assert seen.scope[DPOP_KEY] == tuple(ALL_DPOP_ALGS)


@pytest.mark.parametrize("alg", ["ES256", "ES384", "ES512", "EdDSA", "Ed25519", "PS256", "RS256"])
async def test_every_asymmetric_algorithm_signs_a_proof_by_default(alg):
    key = KEYS[alg]
    token = bound_token(rfc7638(public_jwk(key)))
    response = await drive(
        stage(Inner()), "POST", headers=dpop(token, proof(token, key=key, alg=alg))
    )
    assert response.status == 200, response.body


async def test_the_scheme_is_case_insensitive():
    response = await drive(
        stage(Inner()),
        "POST",
        headers=[(b"authorization", f"dpop  {TOKEN} ".encode()), (b"dpop", proof(TOKEN))],
    )
    assert response.status == 200


async def test_the_verified_token_cache_never_spares_the_proof():
    authn = stage(Inner())
    assert (await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN)))).status == 200
    # The token is cached now: the next request without a proof, with the first one again,
    # or with one for another method is refused all the same.
    refused(await drive(authn, "POST", headers=dpop(TOKEN)), "invalid_dpop_proof", "no DPoP header")
    first = proof(TOKEN)
    assert (await drive(authn, "POST", headers=dpop(TOKEN, first))).status == 200
    refused(
        await drive(authn, "POST", headers=dpop(TOKEN, first)), "invalid_dpop_proof", "used already"
    )
    refused(
        await drive(authn, "GET", headers=dpop(TOKEN, proof(TOKEN))),
        "invalid_dpop_proof",
        "method 'POST'",
    )


# --- attacks ----------------------------------------------------------------------------------


async def test_a_replayed_proof_is_refused_on_the_dpop_challenge():
    authn = stage(Inner())
    once = proof(TOKEN)
    assert (await drive(authn, "POST", headers=dpop(TOKEN, once))).status == 200
    again = await drive(authn, "POST", headers=dpop(TOKEN, once))
    refused(again, "invalid_dpop_proof", "this DPoP proof was used already")
    on_dpop_challenge(again, "invalid_dpop_proof")


async def test_two_stages_sharing_a_replay_cache_accept_a_proof_once():
    # Two replicas of one policy (in production a RedisReplayCache; e2e: test_dpop_resource_server).
    shared = MemoryReplayCache()
    once = proof(TOKEN)
    first = await drive(stage(Inner(), replay=shared), "POST", headers=dpop(TOKEN, once))
    second = await drive(stage(Inner(), replay=shared), "POST", headers=dpop(TOKEN, once))
    assert first.status == 200
    refused(second, "invalid_dpop_proof", "used already")


@pytest.mark.parametrize(
    ("method", "htu", "words"),
    [
        ("GET", URL, "is for method 'POST'"),
        ("POST", "http://gw.test/other", "this request is to http://gw.test/mcp"),
        ("POST", "http://evil.test/mcp", "this request is to http://gw.test/mcp"),
        ("POST", "https://gw.test/mcp", "this request is to http://gw.test/mcp"),
        ("POST", "http://gw.test:8080/mcp", "this request is to http://gw.test/mcp"),
    ],
)
async def test_a_proof_for_another_method_or_url_is_refused(method, htu, words):
    signed_for = "POST" if method == "GET" else method
    response = await drive(
        stage(Inner()), method, headers=dpop(TOKEN, proof(TOKEN, method=signed_for, htu=htu))
    )
    refused(response, "invalid_dpop_proof", words)
    on_dpop_challenge(response, "invalid_dpop_proof")


async def test_a_stolen_token_with_a_proof_by_another_key_is_invalid_token():
    response = await drive(stage(Inner()), "POST", headers=dpop(TOKEN, proof(TOKEN, key=OTHER_EC)))
    refused(response, "invalid_token", "bound to another key")
    on_dpop_challenge(response, "invalid_token")


async def test_a_proof_made_for_another_token_is_refused():
    other = bound_token(sub="bob")
    response = await drive(stage(Inner()), "POST", headers=dpop(TOKEN, proof(other)))
    refused(response, "invalid_dpop_proof", "ath is not the hash of the access token")


@pytest.mark.parametrize(
    ("head", "key", "alg", "words"),
    [
        # An HMAC proof (its "key" a shared secret) is never a proof of possession.
        (
            {"typ": "dpop+jwt", "alg": "HS256", "jwk": dict(HMAC_KEY.as_dict(private=True))},
            HMAC_KEY,
            "HS256",
            "alg 'HS256'",
        ),
        # A jwk holding its private key: the key has leaked.
        (
            header("ES256", jwk=dict(KEYS["ES256"].as_dict(private=True))),
            KEYS["ES256"],
            "ES256",
            "private key",
        ),
        (header("ES256", typ="JWT"), KEYS["ES256"], "ES256", "typ"),
        (header("ES256", jwk=None, kid="k1"), KEYS["ES256"], "ES256", "no jwk"),
    ],
)
async def test_malformed_proofs_are_refused(head, key, alg, words):
    response = await drive(
        stage(Inner()), "POST", headers=dpop(TOKEN, proof(TOKEN, key=key, alg=alg, head=head))
    )
    refused(response, "invalid_dpop_proof", words)


@pytest.mark.parametrize(("skew", "words"), [(-301, "made 301 s ago"), (301, "in the future")])
async def test_a_proof_outside_the_iat_window_is_refused(skew, words):
    clock = Clock()
    made = proof(TOKEN)
    clock.now -= skew
    response = await drive(stage(Inner(), clock=clock), "POST", headers=dpop(TOKEN, made))
    refused(response, "invalid_dpop_proof", words)


async def test_the_iat_window_is_the_providers_max_age():
    clock = Clock()
    made = proof(TOKEN)
    clock.now += 61
    strict = stage(Inner(), provider(max_age=60.0), clock=clock)
    refused(
        await drive(strict, "POST", headers=dpop(TOKEN, made)), "invalid_dpop_proof", "at most 60 s"
    )


async def test_two_proofs_are_refused():
    response = await drive(stage(Inner()), "POST", headers=dpop(TOKEN, proof(TOKEN), proof(TOKEN)))
    refused(response, "invalid_dpop_proof", "more than one DPoP header")


async def test_an_algorithm_the_provider_does_not_list_is_refused_and_not_offered():
    only = stage(Inner(), provider(algorithms=frozenset({"ES256"})))
    key = KEYS["EdDSA"]
    token = bound_token(rfc7638(public_jwk(key)))
    response = await drive(only, "POST", headers=dpop(token, proof(token, key=key, alg="EdDSA")))
    refused(response, "invalid_dpop_proof", "alg 'EdDSA' is not accepted")
    assert b'algs="ES256"' in challenges(response)[1]


# --- the schemes and the modes ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["Allowed", "Required"])
async def test_a_bound_token_sent_as_bearer_is_refused_on_the_bearer_challenge(mode):
    # RFC 9449 §7.2: the downgrade a thief would try; with or without the client's proof.
    for headers in ([bearer(TOKEN)], [bearer(TOKEN), (b"dpop", proof(TOKEN))]):
        response = await drive(stage(Inner(), provider(mode)), "POST", headers=headers)
        refused(response, "invalid_token", "DPoP-bound (cnf.jkt)")
        bearer_value, dpop_value = challenges(response)
        assert bearer_value.startswith(b'Bearer error="invalid_token", error_description="the')
        assert b"error=" not in dpop_value


async def test_allowed_takes_unbound_tokens_as_bearer_and_refuses_them_as_dpop():
    plain = plain_token()
    inner = Inner()
    ok = await drive(
        stage(inner), "POST", headers=[bearer(plain), (b"dpop", b"x.y.z")], inner=inner
    )
    assert ok.status == 200
    assert inner.last.header(b"dpop") is None  # even a stray proof never reaches the backend
    assert DPOP_KEY not in inner.last.scope
    response = await drive(stage(Inner()), "POST", headers=dpop(plain, proof(plain)))
    refused(response, "invalid_token", "not DPoP-bound")
    on_dpop_challenge(response, "invalid_token")


async def test_required_refuses_unbound_tokens_either_way():
    plain = plain_token()
    required = stage(Inner(), provider("Required"))
    refused(
        await drive(required, "POST", headers=[bearer(plain)]), "invalid_token", "dpop: Required"
    )
    refused(
        await drive(required, "POST", headers=dpop(plain, proof(plain))),
        "invalid_token",
        "dpop: Required",
    )
    assert (await drive(required, "POST", headers=dpop(TOKEN, proof(TOKEN)))).status == 200


async def test_disabled_takes_bearer_only_and_offers_no_dpop():
    disabled = stage(Inner(), provider("Disabled"))
    assert (await drive(disabled, "POST", headers=[bearer(plain_token())])).status == 200
    # The DPoP scheme is unknown there, as at a server without DPoP: no token was sent.
    unknown = await drive(disabled, "POST", headers=dpop(TOKEN, proof(TOKEN)))
    refused(unknown, "invalid_token", "missing bearer token")
    assert challenges(unknown) == [f'Bearer resource_metadata="{PRM}", scope="openid"'.encode()]
    # A bound token as Bearer: taking it would undo its binding.
    refused(
        await drive(disabled, "POST", headers=[bearer(TOKEN)]), "invalid_token", "dpop: Disabled"
    )


@pytest.mark.parametrize(
    ("cnf", "words"),
    [
        ({"x5t#S256": "bwcK0esc3ACC3DB2Y5_lESsXE8o9ltc05O89jdN-dg2"}, "cnf x5t#S256"),
        ({"jkt": JKT, "jwk": {"kty": "EC"}}, "cnf jwk"),
        ({"jkt": 7}, "cnf.jkt is not a non-empty string"),
        ({"jkt": ""}, "cnf.jkt is not a non-empty string"),
        ("bound", "cnf claim is not a JSON object"),
    ],
)
async def test_a_binding_the_gateway_cannot_check_is_refused_not_ignored(cnf, words):
    token = mint(KEY, good(cnf=cnf))
    for headers in ([bearer(token)], dpop(token, proof(token))):
        refused(await drive(stage(Inner()), "POST", headers=headers), "invalid_token", words)


async def test_permissive_mode_takes_a_bad_proof_as_anonymous_and_passes_neither_header_on():
    inner = Inner()
    response = await drive(
        stage(inner, mode="Permissive"),
        "POST",
        headers=dpop(TOKEN, proof(TOKEN, key=OTHER_EC)),
        inner=inner,
    )
    assert response.status == 200
    assert CLAIMS_KEY not in inner.last.scope
    assert inner.last.header(b"authorization") is None
    assert inner.last.header(b"dpop") is None


async def test_forward_token_forwards_the_dpop_authorization_but_never_the_proof():
    inner = Inner()
    await drive(
        stage(inner, forward_token=True), "POST", headers=dpop(TOKEN, proof(TOKEN)), inner=inner
    )
    assert inner.last.header(b"authorization") == f"DPoP {TOKEN}".encode()
    assert inner.last.header(b"dpop") is None


async def test_with_several_providers_each_token_meets_its_own_providers_mode():
    other = dataclasses.replace(provider("Disabled"), issuer="http://other-idp/", index=1)
    authn = stage(Inner(), provider("Required", algorithms=frozenset({"ES256"})), other)
    plain_other = mint(KEY, good(iss="http://other-idp/"))
    assert (await drive(authn, "POST", headers=[bearer(plain_other)])).status == 200
    refused(
        await drive(authn, "POST", headers=[bearer(plain_token())]), "invalid_token", "Required"
    )
    ok = await drive(authn, "POST", headers=dpop(TOKEN, proof(TOKEN)))
    assert ok.status == 200
    # The challenge offers what the providers that take DPoP accept.
    missing = await drive(authn, "POST")
    assert challenges(missing)[1].startswith(b'DPoP algs="ES256"')


async def test_a_keycloak_dpop_token_typed_dpop_is_an_access_token_held_to_its_key():
    # Keycloak writes `typ: DPoP` (not `Bearer`) into the access tokens it binds.
    keycloak = dataclasses.replace(provider(), kind=ProviderKind.KEYCLOAK)
    token = bound_token(typ="DPoP")
    authn = stage(Inner(), keycloak)
    assert (await drive(authn, "POST", headers=dpop(token, proof(token)))).status == 200
    refused(await drive(authn, "POST", headers=[bearer(token)]), "invalid_token", "DPoP-bound")
    refused(
        await drive(authn, "POST", headers=dpop(token, proof(token, key=OTHER_EC))),
        "invalid_token",
        "another key",
    )
