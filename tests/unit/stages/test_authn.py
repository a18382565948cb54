"""The JWT authentication stage (`dataplane/authn.py`) on its own: the 401 it answers and the
shape of its `WWW-Authenticate` challenge, what it hands inward on success, and how it uses the
keyset holder (unknown `kid` refetch, verified-token cache).

Covered elsewhere, not repeated: token verification rules (`tests/unit/test_tokens.py`), the
token-kind refusals and the stripping of every `Authorization` header at this stage
(`test_tokens.py::test_stage_*`), the 401 while no keyset was ever fetched and the challenge's
origin behind trusted forwarded headers (`tests/unit/test_dataplane.py`)."""

from __future__ import annotations

import dataclasses

import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.jwks import InlineKeyset
from mcp_oauth_gateway.controlplane.keys import Keyset, parse_jwks
from mcp_oauth_gateway.controlplane.snapshot import CompiledMcp, CompiledProvider, KeysetSource
from mcp_oauth_gateway.dataplane import authn as authn_module
from mcp_oauth_gateway.dataplane.authn import JwtAuthentication
from support import jwks_of, mint, new_key
from unit.tokens_support import ALL_DPOP_ALGS, ISSUER, KEY, KEYSET, bearer, compiled_mcp, good

from .harness import Inner, Response, drive, values

PROVIDER = CompiledProvider(
    ISSUER,
    frozenset({"mcp-public"}),
    KeysetSource("inline", 0.0),
    "http://idp/.well-known/openid-configuration",
)
PRM = "http://gw.test/.well-known/oauth-protected-resource/mcp"
ROTATED = new_key("k2")


class Holder:
    """A keyset holder whose refetch (for an unknown `kid`) installs `next_keyset`."""

    def __init__(self, keyset: Keyset | None, next_keyset: Keyset | None = None):
        self.url = "http://idp/jwks"
        self.keyset = keyset
        self.next_keyset = next_keyset
        self.refetches = 0

    async def refetch_for_unknown_kid(self) -> bool:
        self.refetches += 1
        if self.next_keyset is None:
            return False
        self.keyset = self.next_keyset
        return True


def stage(
    inner: Inner, mcp: CompiledMcp | None = None, forward_token: bool = False, keys: object = None
) -> JwtAuthentication:
    return JwtAuthentication(
        inner,
        [(PROVIDER, keys or InlineKeyset(KEYSET))],  # type: ignore[list-item]
        mcp if mcp is not None else compiled_mcp(None),
        forward_token,
    )


TOKEN = mint(KEY, good())
# Every DPoP algorithm, as the challenge offers them (providers take DPoP unless Disabled).
ALGS = " ".join(ALL_DPOP_ALGS)


def challenges(response: Response) -> list[bytes]:
    """The WWW-Authenticate values, in order: Bearer, then DPoP where the route takes it."""
    return values(response.headers, b"www-authenticate")


def bearer_challenge(response: Response) -> bytes:
    """The Bearer challenge, which comes first (TS clients read only the first)."""
    found = challenges(response)
    assert found, "no WWW-Authenticate"
    assert found[0].startswith(b"Bearer"), found
    return found[0]


# --- what it answers itself -----------------------------------------------------------------


async def test_no_token_is_401_with_a_challenge_pointing_at_the_metadata_without_an_error():
    inner = Inner()
    response = await drive(stage(inner), "POST", inner=inner)
    assert not response.reached
    assert response.status == 401
    assert response.json() == {
        "error": "invalid_token",
        "error_description": "Unauthorized: missing bearer token",
    }
    # RFC 6750 §3.1: no credentials, no error code; Bearer first, metadata and scope hints.
    assert challenges(response) == [
        f'Bearer resource_metadata="{PRM}", scope="openid"'.encode(),
        f'DPoP algs="{ALGS}", resource_metadata="{PRM}", scope="openid"'.encode(),
    ]
    assert response.header(b"cache-control") == b"no-store"


@pytest.mark.parametrize(
    "value",
    [
        b"Basic YWxpY2U6c2VjcmV0",
        b"Bearer",
        b"Bearer    ",
        b"Token abc.def.ghi",
        b"Bearerabc.def.ghi",
    ],
)
async def test_anything_but_a_bearer_token_counts_as_no_token(value):
    response = await drive(stage(Inner()), "POST", headers=[(b"authorization", value)])
    assert response.status == 401
    assert response.json()["error_description"] == "Unauthorized: missing bearer token"
    assert challenges(response)
    assert not any(b"error=" in value for value in challenges(response))


async def test_a_malformed_token_is_401_and_the_challenge_says_why():
    inner = Inner()
    response = await drive(stage(inner), "POST", headers=[bearer("not-a-jwt")], inner=inner)
    why = "malformed token: expected three dot-separated parts (header.payload.signature)"
    assert not response.reached
    assert response.status == 401
    assert response.json() == {"error": "invalid_token", "error_description": why}
    assert challenges(response) == [
        (
            f'Bearer error="invalid_token", error_description="{why}", '
            f'resource_metadata="{PRM}", scope="openid"'
        ).encode(),
        # RFC 9449 §7.2: the error goes on the challenge of the scheme used, and only there.
        f'DPoP algs="{ALGS}", resource_metadata="{PRM}", scope="openid"'.encode(),
    ]


async def test_quotes_in_the_reason_are_escaped_inside_the_challenge():
    token = mint(KEY, good(iss="http://idp/it's"))  # repr() quotes this value with "
    response = await drive(stage(Inner()), "POST", headers=[bearer(token)])
    challenge = bearer_challenge(response)
    assert response.json()["error_description"].startswith(
        'iss "http://idp/it\'s" is not the expected issuer'
    )
    assert b'error_description="iss \\"http://idp/it\'s\\" is not the expected issuer' in challenge


async def test_the_challenge_names_the_metadata_at_the_host_the_client_used():
    response = await drive(
        stage(Inner()), "POST", host=b"mcp.example:8443", scope={"scheme": "https"}
    )
    assert bearer_challenge(response) == (
        b'Bearer resource_metadata="https://mcp.example:8443/.well-known/'
        b'oauth-protected-resource/mcp", scope="openid"'
    )


async def test_without_mcp_settings_the_challenge_is_plain_bearer():
    plain = JwtAuthentication(Inner(), [(PROVIDER, InlineKeyset(KEYSET))], None, False)
    missing = await drive(plain, "POST")
    bad = await drive(plain, "POST", headers=[bearer("a.b")])
    assert challenges(missing) == [b"Bearer", f'DPoP algs="{ALGS}"'.encode()]
    assert challenges(bad) == [
        b'Bearer error="invalid_token", error_description="malformed token: expected three '
        b'dot-separated parts (header.payload.signature)"',
        f'DPoP algs="{ALGS}"'.encode(),
    ]


async def test_no_scope_hint_when_the_policy_lists_no_scopes():
    mcp = dataclasses.replace(compiled_mcp(None), scopes_supported=())
    response = await drive(stage(Inner(), mcp), "POST")
    assert bearer_challenge(response) == f'Bearer resource_metadata="{PRM}"'.encode()


# --- what it hands inward ---------------------------------------------------------------------


async def test_a_valid_token_goes_inward_as_claims_and_without_authorization():
    inner = Inner()
    response = await drive(
        stage(inner),
        "POST",
        headers=[(b"accept", b"application/json"), bearer(TOKEN), (b"mcp-session-id", b"s1")],
        body=b'{"jsonrpc": "2.0"}',
        inner=inner,
    )
    assert response.reached
    assert response.status == 200
    seen = inner.last
    assert seen.scope[CLAIMS_KEY]["sub"] == "alice"
    assert seen.scope[CLAIMS_KEY]["groups"] == ["mcp-agent", "users"]
    assert seen.scope[TOKEN_KEY] == TOKEN
    assert seen.headers == [
        (b"host", b"gw.test"),
        (b"accept", b"application/json"),
        (b"mcp-session-id", b"s1"),
    ]
    assert seen.body == b'{"jsonrpc": "2.0"}'


async def test_the_scheme_is_case_insensitive_and_surrounding_spaces_are_ignored():
    inner = Inner()
    response = await drive(
        stage(inner),
        "POST",
        inner=inner,
        headers=[(b"authorization", f"bEaReR   {TOKEN}  ".encode())],
    )
    assert response.status == 200
    assert inner.last.scope[TOKEN_KEY] == TOKEN


async def test_forward_token_puts_the_verified_header_back_where_it_was():
    inner = Inner()
    header = bearer(TOKEN)
    await drive(
        stage(inner, forward_token=True),
        "POST",
        inner=inner,
        headers=[(b"accept", b"*/*"), header, (b"x-after", b"1")],
    )
    assert inner.last.headers == [
        (b"host", b"gw.test"),
        (b"accept", b"*/*"),
        header,
        (b"x-after", b"1"),
    ]


# --- the keyset holder: unknown kid, cache ------------------------------------------------------


async def test_an_unknown_kid_triggers_one_refetch_and_the_new_key_verifies():
    holder = Holder(KEYSET, parse_jwks(jwks_of(KEY, ROTATED), version=2))
    inner = Inner()
    response = await drive(
        stage(inner, keys=holder), "POST", inner=inner, headers=[bearer(mint(ROTATED, good()))]
    )
    assert response.status == 200
    assert holder.refetches == 1


async def test_an_unknown_kid_still_unknown_after_the_refetch_is_401():
    holder = Holder(KEYSET)
    response = await drive(
        stage(Inner(), keys=holder), "POST", headers=[bearer(mint(ROTATED, good()))]
    )
    assert response.status == 401
    assert response.json()["error_description"] == "no key with kid 'k2' in the issuer's keyset"
    assert holder.refetches == 1


async def test_a_token_is_verified_once_while_the_keyset_is_unchanged(monkeypatch):
    calls: list[str] = []
    real = authn_module.verify_token

    def counting(token, keyset, rules, now, parsed=None):
        calls.append(token)
        return real(token, keyset, rules, now, parsed)

    monkeypatch.setattr(authn_module, "verify_token", counting)
    authn = stage(Inner())
    statuses = [(await drive(authn, "POST", headers=[bearer(TOKEN)])).status for _ in range(3)]
    assert statuses == [200, 200, 200]
    assert calls == [TOKEN]


async def test_a_cached_token_is_checked_again_once_the_keyset_changes():
    # The key that signed it was rotated out: the cached verdict must not outlive it.
    holder = Holder(KEYSET)
    authn = stage(Inner(), keys=holder)
    assert (await drive(authn, "POST", headers=[bearer(TOKEN)])).status == 200
    holder.keyset = parse_jwks(jwks_of(ROTATED), version=2)
    response = await drive(authn, "POST", headers=[bearer(TOKEN)])
    assert response.status == 401
    assert response.json()["error_description"] == "no key with kid 'k1' in the issuer's keyset"


# --- Optional and Permissive modes ----------------------------------------------------------


def moded(inner: Inner, mode: str) -> JwtAuthentication:
    return JwtAuthentication(
        inner, [(PROVIDER, InlineKeyset(KEYSET))], compiled_mcp(None), False, None, mode
    )


BAD = mint(KEY, good(iss="http://elsewhere/"))


@pytest.mark.parametrize(
    ("mode", "authorization", "status", "anonymous"),
    [
        ("Strict", None, 401, None),
        ("Strict", BAD, 401, None),
        ("Optional", None, 200, True),
        ("Optional", BAD, 401, None),  # a token that is sent must be good
        ("Optional", TOKEN, 200, False),
        ("Permissive", None, 200, True),
        ("Permissive", BAD, 200, True),  # never refused: goes on without claims
        ("Permissive", "not.a.jwt", 200, True),
        ("Permissive", TOKEN, 200, False),
    ],
)
async def test_what_each_mode_does_with_no_bad_and_good_tokens(
    mode, authorization, status, anonymous
):
    inner = Inner()
    headers = [bearer(authorization)] if authorization else []
    response = await drive(moded(inner, mode), "POST", headers=headers, inner=inner)
    assert response.status == status
    if anonymous is None:
        assert not response.reached
        return
    assert response.reached
    assert (CLAIMS_KEY not in inner.last.scope) is anonymous
    # Whatever the mode, a token that was not verified never reaches the backend.
    assert inner.last.header(b"authorization") is None


# --- several providers on one route ---------------------------------------------------------

OTHER_ISSUER = "http://other-idp/realms/corp"
OTHER_KEY = new_key("corp-1")
OTHER = dataclasses.replace(
    PROVIDER, issuer=OTHER_ISSUER, audiences=frozenset({"corp-mcp"}), index=1
)


class Watched:
    """A keyset holder that records whether its keys were ever looked at."""

    def __init__(self, keyset: Keyset):
        self.url = "http://watched/jwks"
        self._keyset = keyset
        self.looked = 0

    @property
    def keyset(self) -> Keyset:
        self.looked += 1
        return self._keyset

    async def refetch_for_unknown_kid(self) -> bool:
        self.looked += 1
        return False


def two(inner: Inner) -> tuple[JwtAuthentication, Watched, Watched]:
    first, second = Watched(KEYSET), Watched(parse_jwks(jwks_of(OTHER_KEY), version=1))
    stage = JwtAuthentication(
        inner,
        [(PROVIDER, first), (OTHER, second)],  # type: ignore[list-item]
        compiled_mcp(None),
        False,
    )
    return stage, first, second


async def test_each_token_is_verified_only_by_the_provider_its_iss_names():
    inner = Inner()
    stage, first, second = two(inner)
    corp = mint(OTHER_KEY, good(iss=OTHER_ISSUER, aud="corp-mcp"))
    response = await drive(stage, "POST", headers=[bearer(corp)], inner=inner)
    assert response.status == 200
    assert inner.last.scope[CLAIMS_KEY]["iss"] == OTHER_ISSUER
    assert (first.looked, second.looked) == (0, 1)
    # Each provider's own audiences: the first provider's audience is not the second's.
    wrong_aud = mint(OTHER_KEY, good(iss=OTHER_ISSUER, aud="mcp-public"))
    refused = await drive(stage, "POST", headers=[bearer(wrong_aud)], inner=inner)
    assert refused.status == 401
    assert (
        "does not include any accepted audience ['corp-mcp']" in refused.json()["error_description"]
    )


async def test_a_token_signed_by_one_provider_claiming_the_others_iss_is_refused():
    inner = Inner()
    stage, _, _ = two(inner)
    # Signed with the first provider's key but naming the second: checked with the second's.
    forged = mint(KEY, good(iss=OTHER_ISSUER, aud="corp-mcp"))
    response = await drive(stage, "POST", headers=[bearer(forged)], inner=inner)
    assert response.status == 401
    assert not inner.seen


@pytest.mark.parametrize("iss", ["http://unknown/", None, 7])
async def test_an_unknown_iss_is_401_without_touching_any_keyset(iss):
    inner = Inner()
    stage, first, second = two(inner)
    claims = good()
    claims.pop("iss")
    if iss is not None:
        claims["iss"] = iss
    response = await drive(stage, "POST", headers=[bearer(mint(KEY, claims))], inner=inner)
    assert response.status == 401
    assert "is not one of this route's issuers" in response.json()["error_description"]
    assert (first.looked, second.looked) == (0, 0)
