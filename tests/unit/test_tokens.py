from __future__ import annotations

import time

import pytest
from joserfc.jwk import ECKey, RSAKey

from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.dataplane.tokens import (
    TokenError,
    TokenRules,
    UnknownKeyId,
    check_claims,
    verify_token,
)
from support import claims_for, jwks_of, mint, new_key, unsigned

ISSUER = "http://idp/application/o/mcp/"
RULES = TokenRules(issuer=ISSUER, audiences=frozenset({"mcp-public"}))
KEY = new_key("k1")
KEYSET = parse_jwks(jwks_of(KEY), version=1)


def good(**overrides: object) -> dict[str, object]:
    claims = claims_for(ISSUER, "mcp-public")
    claims.update(overrides)
    return claims


def test_valid_token_returns_claims():
    claims = verify_token(mint(KEY, good()), KEYSET, RULES, time.time())
    assert claims["sub"] == "alice"


@pytest.mark.parametrize(("claims", "reason"), [
    ({"iss": ISSUER.rstrip("/")}, "a trailing slash matters"),
    ({"aud": ["a", "b"]}, "does not include any accepted audience"),
    ({"aud": None}, "no aud claim"),
    ({"exp": None}, "no numeric exp"),
    ({"exp": True}, "no numeric exp"),
    ({"exp": 1}, "expired"),
    ({"nbf": 2**40}, "not yet valid"),
    ({"iat": 2**40}, "issued in the future"),
])
def test_claim_failures(claims, reason):
    with pytest.raises(TokenError, match=reason):
        check_claims(good(**claims), RULES, time.time())


def test_leeway_applies_to_exp():
    now = time.time()
    check_claims(good(exp=int(now) - 30), RULES, now)


def test_aud_array_any_of():
    check_claims(good(aud=["other", "mcp-public"]), RULES, time.time())


@pytest.mark.parametrize(("header", "reason"), [
    ({"alg": "none", "kid": "k1"}, "alg 'none' is not accepted"),
    ({"alg": "HS256", "kid": "k1"}, "alg 'HS256' is not accepted"),
    ({"alg": "RS256", "kid": "k1", "typ": "JWE"}, "typ 'JWE'"),
    ({"alg": "RS256", "kid": "k1", "crit": ["exp"]}, "crit"),
    ({"alg": "RS256", "kid": 7}, "kid is not a string"),
])
def test_header_refusals(header, reason):
    with pytest.raises(TokenError, match=reason):
        verify_token(unsigned(header, good(), b"sig"), KEYSET, RULES, time.time())


def test_unknown_kid_is_distinguished():
    with pytest.raises(UnknownKeyId):
        verify_token(mint(new_key("k9"), good()), KEYSET, RULES, time.time())


def test_kid_with_path_characters_is_just_unknown():
    token = mint(KEY, good(), header={"kid": "../../etc/passwd'; DROP"})
    with pytest.raises(UnknownKeyId):
        verify_token(token, KEYSET, RULES, time.time())


def test_jku_and_jwk_headers_are_ignored_for_key_choice():
    attacker = new_key("k1")
    small = ECKey.generate_key("P-256").as_dict(private=False)
    token = mint(attacker, good(), header={"jku": "http://evil/jwks", "x5u": "http://evil/x",
                                           "jwk": small, "x5c": ["MIIBevil"]})
    with pytest.raises(TokenError, match="signature does not verify"):
        verify_token(token, KEYSET, RULES, time.time())


def test_key_alg_restricts_algorithms():
    unrestricted = RSAKey.import_key({k: v for k, v in KEY.as_dict(private=True).items()
                                      if k != "alg"})
    ps_token = mint(unrestricted, good(), alg="PS256")
    with pytest.raises(TokenError, match="cannot be verified with key"):
        verify_token(ps_token, KEYSET, RULES, time.time())


def test_jwks_skips_unusable_keys_but_keeps_good_ones():
    document = jwks_of(KEY)
    document["keys"] += [{"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
                         {"kty": "RSA", "kid": "enc", "use": "enc", "n": "x", "e": "AQAB"},
                         "garbage"]
    keyset = parse_jwks(document, version=3)
    assert set(keyset.by_kid) == {"k1"}
    assert len(keyset.skipped) == 3


def test_jwks_without_usable_keys_is_an_error():
    with pytest.raises(ValueError, match="no usable signature key"):
        parse_jwks({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, version=1)
    with pytest.raises(ValueError, match='"keys" array'):
        parse_jwks({"nokeys": []}, version=1)


def test_secrets_are_compared_in_constant_time(monkeypatch):
    """PKCE verifiers, signed client ids and consent cookies go through hmac.compare_digest."""
    import hmac

    from mcp_oauth_gateway import pkce
    from mcp_oauth_gateway.broker import clients

    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    assert pkce.verify("v" * 50, pkce.s256("v" * 50))
    client_id = clients.issue_client_id(b"s" * 32, "c", ["http://127.0.0.1/cb"])
    assert clients.read_client_id(b"s" * 32, client_id) is not None
    assert len(calls) == 2
