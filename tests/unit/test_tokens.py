from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from joserfc import jws
from joserfc.jwk import ECKey, RSAKey

from mcp_oauth_gateway.controlplane.jwks import InlineKeyset
from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.controlplane.snapshot import CompiledProvider, KeysetSource
from mcp_oauth_gateway.dataplane.authn import JwtAuthentication
from mcp_oauth_gateway.dataplane.metrics import failure_reason
from mcp_oauth_gateway.dataplane.tokens import (
    TokenError,
    TokenRules,
    UnknownKeyId,
    check_claims,
    verify_token,
)
from mcp_oauth_gateway.provider_kinds import ProviderKind, parse_kind
from mcp_oauth_gateway.providers import access_tokens
from mcp_oauth_gateway.providers.access_tokens import access_token_rule
from support import jwks_of, mint, new_key, unsigned

from .tokens_support import ISSUER, KEY, KEYSET, bearer, compiled_mcp, good

RULES = TokenRules(issuer=ISSUER, audiences=frozenset({"mcp-public"}))


def test_valid_token_returns_claims():
    claims = verify_token(mint(KEY, good()), KEYSET, RULES, time.time())
    assert claims["sub"] == "alice"


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"iss": ISSUER.rstrip("/")}, "a trailing slash matters"),
        ({"aud": ["a", "b"]}, "does not include any accepted audience"),
        ({"aud": None}, "no aud claim"),
        ({"exp": None}, "no numeric exp"),
        ({"exp": True}, "no numeric exp"),
        ({"exp": 1}, "expired"),
        ({"nbf": 2**40}, "not yet valid"),
        ({"iat": 2**40}, "issued in the future"),
    ],
)
def test_claim_failures(claims, reason):
    with pytest.raises(TokenError, match=reason):
        check_claims(good(**claims), RULES, time.time())


@pytest.mark.parametrize(
    "claims",
    [{"groups": ["admin\u0000x"]}, {"email": "a@b\u0000.evil"}, {"ext": {"role\u0000": "x"}}],
)
def test_a_nul_in_any_claim_refuses_the_token(claims):
    # The CEL runtime reads strings only up to a NUL: "admin\0x" would pass `"admin" in groups`.
    with pytest.raises(TokenError, match="a claim contains a NUL character"):
        verify_token(mint(KEY, good(**claims)), KEYSET, RULES, time.time())


def test_leeway_applies_to_exp():
    now = time.time()
    check_claims(good(exp=int(now) - 30), RULES, now)


def test_aud_array_any_of():
    check_claims(good(aud=["other", "mcp-public"]), RULES, time.time())


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"alg": "none", "kid": "k1"}, "alg 'none' is not accepted"),
        ({"alg": "HS256", "kid": "k1"}, "alg 'HS256' is not accepted"),
        ({"alg": "RS256", "kid": "k1", "typ": "JWE"}, "typ 'JWE'"),
        ({"alg": "RS256", "kid": "k1", "crit": ["exp"]}, "crit"),
        ({"alg": "RS256", "kid": 7}, "kid is not a string"),
        ({"alg": "RS256", "kid": ["k1"]}, "kid is not a string"),
        ({"alg": ["RS256"], "kid": "k1"}, "alg \\['RS256'\\] is not accepted"),
        ({"alg": "RS256", "kid": "k1", "typ": 1}, "typ 1 "),
        # The first failing rule names the refusal: alg, then typ, crit, kid.
        ({"alg": "none", "typ": "JWE", "crit": ["x"], "kid": 7}, "alg 'none'"),
        ({"alg": "RS256", "typ": "JWE", "crit": ["x"], "kid": 7}, "typ 'JWE'"),
        ({"alg": "RS256", "crit": ["x"], "kid": 7}, "crit"),
    ],
)
def test_header_refusals(header, reason):
    # Twice: the header's verdict is decided once per distinct header segment and remembered.
    for _ in range(2):
        with pytest.raises(TokenError, match=reason):
            verify_token(unsigned(header, good(), b"sig"), KEYSET, RULES, time.time())
    # A good header after it is judged on its own.
    assert verify_token(mint(KEY, good()), KEYSET, RULES, time.time())["sub"] == "alice"


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
    token = mint(
        attacker,
        good(),
        header={
            "jku": "http://evil/jwks",
            "x5u": "http://evil/x",
            "jwk": small,
            "x5c": ["MIIBevil"],
        },
    )
    with pytest.raises(TokenError, match="signature does not verify"):
        verify_token(token, KEYSET, RULES, time.time())


def test_key_alg_restricts_algorithms():
    unrestricted = RSAKey.import_key(
        {k: v for k, v in KEY.as_dict(private=True).items() if k != "alg"}
    )
    ps_token = mint(unrestricted, good(), alg="PS256")
    with pytest.raises(TokenError, match="cannot be verified with key"):
        verify_token(ps_token, KEYSET, RULES, time.time())


def test_jwks_skips_unusable_keys_but_keeps_good_ones():
    document = jwks_of(KEY)
    document["keys"] += [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {"kty": "RSA", "kid": "enc", "use": "enc", "n": "x", "e": "AQAB"},
        "garbage",
    ]
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
    client_id = clients.issue_client_id(b"s" * 32, "c", ["http://127.0.0.1/cb"], "r")
    assert clients.read_client_id(b"s" * 32, client_id) is not None
    assert len(calls) == 2


# --- token kind: only access tokens, by what each provider marks them with ------------------

ID_TOKEN_HINT = "send the access_token from the token response"
JWT_HEADER = {"typ": "JWT"}  # what Keycloak and authentik put in the header of every token


def rules_for(provider: str | None) -> TokenRules:
    kind = parse_kind(provider) if provider is not None else None
    return TokenRules(
        issuer=ISSUER, audiences=frozenset({"mcp-public"}), access_token=access_token_rule(kind)
    )


def test_each_provider_gets_its_own_rule():
    assert access_token_rule(ProviderKind.KEYCLOAK) is access_tokens.KEYCLOAK
    assert access_token_rule(ProviderKind.AUTHENTIK) is access_tokens.AUTHENTIK
    # `Authentik` is a spelling of configuration only: it reads as the same kind.
    assert access_token_rule(parse_kind("Authentik")) is access_tokens.AUTHENTIK
    assert access_token_rule(None) is access_tokens.GENERIC
    assert TokenRules(ISSUER, None).access_token is access_tokens.GENERIC  # never unchecked


ACCEPTED = [
    ("Keycloak", good(typ="Bearer", azp="mcp-public"), JWT_HEADER),
    ("Keycloak", good(typ="Bearer"), None),  # no header typ at all
    ("ProviderB", good(azp="mcp-public", uid="a1b2c3", nonce="n-1"), JWT_HEADER),
    (None, good(), JWT_HEADER),
    (None, good(typ="Bearer", azp="mcp-public"), JWT_HEADER),
    # Keycloak marks a DPoP-bound access token `typ: DPoP` (its proof is the JWT stage's).
    (
        "Keycloak",
        good(typ="DPoP", cnf={"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"}),
        None,
    ),
    (
        None,
        good(typ="DPoP", cnf={"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"}),
        JWT_HEADER,
    ),
]


@pytest.mark.parametrize(("provider", "claims", "header"), ACCEPTED)
def test_access_token_shape_is_accepted(provider, claims, header):
    if header is None:
        token = jws.serialize_compact({"alg": "RS256", "kid": "k1"}, orjson.dumps(claims), KEY)
    else:
        token = mint(KEY, claims, header=header)
    assert verify_token(token, KEYSET, rules_for(provider), time.time())["sub"] == "alice"


REFUSED = [
    (
        "Keycloak",
        good(typ="ID", azp="mcp-public"),
        "this is an ID token (typ claim 'ID'), not an access token: " + ID_TOKEN_HINT,
    ),
    ("Keycloak", good(typ="Refresh"), "this is a refresh token (typ claim 'Refresh')"),
    ("Keycloak", good(typ="Offline"), "this is an offline refresh token (typ claim 'Offline')"),
    ("Keycloak", good(typ="Logout"), "this is a logout token (typ claim 'Logout')"),
    ("Keycloak", good(typ="bearer"), "typ claim 'bearer' is not 'Bearer'"),
    ("Keycloak", good(), "token has no typ claim 'Bearer'"),
    ("ProviderB", good(nonce="n-1"), "this is an ID token (it has no uid and azp claim"),
    ("ProviderB", good(azp="mcp-public"), "this is an ID token (it has no uid claim"),
    ("ProviderB", good(uid="a1b2c3"), "this is an ID token (it has no azp claim"),
    (None, good(typ="ID"), "this is an ID token (typ claim 'ID')"),
    (None, good(typ=["Bearer"]), "typ claim ['Bearer'] is not 'Bearer'"),
    (None, good(at_hash="x4Gm"), "this is an ID token (it has an at_hash claim"),
    (None, good(c_hash="x4Gm"), "this is an ID token (it has an c_hash claim"),
]


@pytest.mark.parametrize(("provider", "claims", "reason"), REFUSED)
def test_other_token_kinds_are_refused_with_the_reason(provider, claims, reason):
    token = mint(KEY, claims, header=JWT_HEADER)
    with pytest.raises(TokenError) as caught:
        verify_token(token, KEYSET, rules_for(provider), time.time())
    assert str(caught.value).startswith(reason)
    assert ID_TOKEN_HINT in str(caught.value)
    # counted under an existing metrics reason, not "other" (or "audience", from "aud")
    assert failure_reason(str(caught.value)) == "type"


@pytest.mark.parametrize("provider", ["Keycloak", None])
@pytest.mark.parametrize("cnf", [None, {}, {"jkt": 7}, "bound", {"x5t#S256": "abc"}])
def test_a_dpop_typ_claim_without_a_key_binding_is_refused(provider, cnf):
    # Keycloak's mark of a DPoP-bound token on a token bound to nothing: never a bearer token.
    token = mint(KEY, good(typ="DPoP", cnf=cnf), header=JWT_HEADER)
    with pytest.raises(TokenError, match="typ claim 'DPoP' marks a DPoP-bound access token"):
        verify_token(token, KEYSET, rules_for(provider), time.time())


@pytest.mark.parametrize("provider", ["Keycloak", "ProviderB", None])
@pytest.mark.parametrize("typ", ["at+jwt", "application/at+jwt", "AT+JWT"])
def test_rfc9068_header_marks_an_access_token_for_every_provider(provider, typ):
    # no typ claim, no uid/azp, an at_hash: every rule would refuse this with a JWT header
    claims = good(at_hash="x4Gm")
    verify_token(mint(KEY, claims, header={"typ": typ}), KEYSET, rules_for(provider), time.time())
    with pytest.raises(TokenError, match="not an access token"):
        verify_token(mint(KEY, claims, header=JWT_HEADER), KEYSET, rules_for(provider), time.time())


def test_kind_is_checked_after_signature_and_claims():
    # a forged or expired ID token is refused for that, not for being an ID token
    with pytest.raises(TokenError, match="signature does not verify"):
        verify_token(
            mint(new_key("k1"), good(typ="ID"), header=JWT_HEADER),
            KEYSET,
            rules_for("Keycloak"),
            time.time(),
        )
    with pytest.raises(TokenError, match="expired"):
        verify_token(
            mint(KEY, good(typ="ID", exp=1), header=JWT_HEADER),
            KEYSET,
            rules_for("Keycloak"),
            time.time(),
        )


# --- the authentication stage: rule chosen from mcp.provider, Authorization headers ---------


def authn(provider: str | None, forward_token: bool = False) -> tuple[JwtAuthentication, list]:
    seen: list = []

    async def backend(scope, receive, send):
        seen.append(list(scope["headers"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    compiled = CompiledProvider(
        ISSUER,
        frozenset({"mcp-public"}),
        KeysetSource("inline", 0.0),
        "http://idp/.well-known",
        kind=provider,  # type: ignore[arg-type]
    )
    stage = JwtAuthentication(
        backend, [(compiled, InlineKeyset(KEYSET))], compiled_mcp(provider), forward_token
    )
    return stage, seen


def call(stage: JwtAuthentication, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "scheme": "http",
        "headers": [(b"host", b"gw.test"), *headers],
        "query_string": b"",
    }
    asyncio.run(stage(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], orjson.loads(body) if sent[0]["status"] != 200 else {}


@pytest.mark.parametrize(
    ("provider", "id_claims"),
    [
        ("Keycloak", {"typ": "ID", "azp": "mcp-public"}),
        ("ProviderB", {}),
        (None, {"at_hash": "x4Gm"}),
    ],
)
def test_stage_refuses_the_id_token_with_401_and_reason(provider, id_claims):
    stage, seen = authn(provider)
    status, body = call(stage, [bearer(mint(KEY, good(**id_claims), header=JWT_HEADER))])
    assert status == 401
    assert body["error"] == "invalid_token"
    assert body["error_description"].startswith("this is an ID token")
    assert seen == []


def test_stage_rule_follows_the_policy_provider():
    # a Keycloak access token has no uid: the authentik rule must not let it through
    keycloak_access = mint(KEY, good(typ="Bearer", azp="mcp-public"), header=JWT_HEADER)
    assert call(authn("Keycloak")[0], [bearer(keycloak_access)])[0] == 200
    assert call(authn("ProviderB")[0], [bearer(keycloak_access)])[0] == 401


@pytest.mark.parametrize("forward_token", [False, True])
def test_stage_strips_every_authorization_header(forward_token):
    stage, seen = authn("ProviderB", forward_token)
    verified = bearer(mint(KEY, good(azp="mcp-public", uid="u1"), header=JWT_HEADER))
    smuggled = (b"authorization", b"Bearer smuggled.never.verified")
    status, _ = call(stage, [verified, (b"x-other", b"1"), smuggled, smuggled])
    assert status == 200
    forwarded = [h for h in seen[0] if h[0] == b"authorization"]
    assert forwarded == ([verified] if forward_token else [])
    assert (b"x-other", b"1") in seen[0]
