"""The Broker's DPoP-bound access tokens (`dpop/bound_tokens.py`): the provider's token, the
key's thumbprint and the provider sealed for one route of one deployment, opening there only,
and never once changed."""

from __future__ import annotations

import pytest
from joserfc.util import urlsafe_b64decode, urlsafe_b64encode

from mcp_oauth_gateway.dpop import SEALED_PREFIX, BoundToken, SealError, TokenSeal
from mcp_oauth_gateway.dpop.bound_tokens import MAX_SEALED_CHARS, route_aead, seal, unseal

SECRET = b"s" * 32
ROUTE = "0123456789abcdef0123456789abcdef"
OTHER_ROUTE = "fedcba9876543210fedcba9876543210"
INNER = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
BOUND = BoundToken(INNER, "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs", 1)


def sealed(route: str = ROUTE, secret: bytes = SECRET) -> str:
    return seal(route_aead(secret, route), route, BOUND)


def raw_of(token: str) -> bytes:
    return urlsafe_b64decode(token.removeprefix(SEALED_PREFIX).encode())


def token_of(raw: bytes) -> str:
    return SEALED_PREFIX + urlsafe_b64encode(raw).decode()


def test_a_sealed_token_opens_at_its_route_to_what_was_sealed():
    token = sealed()
    assert token.startswith(SEALED_PREFIX)
    # Opaque: neither the provider's token nor the key is readable in it.
    assert INNER not in token
    assert BOUND.jkt not in token
    assert token.count(".") == 1  # never mistaken for a JWS
    assert unseal(route_aead(SECRET, ROUTE), ROUTE, token) == BOUND


def test_two_seals_of_the_same_token_differ():
    # A fresh nonce each time: nothing tells two clients' tokens for one provider token apart.
    assert sealed() != sealed()


@pytest.mark.parametrize(
    ("route", "secret"),
    [(OTHER_ROUTE, SECRET), (ROUTE, b"t" * 32)],
    ids=["another route", "another deployment's secret"],
)
def test_a_token_opens_nowhere_else(route: str, secret: bytes):
    token = sealed()
    with pytest.raises(SealError, match="not issued by this MCP server"):
        unseal(route_aead(secret, route), route, token)


def test_the_route_is_bound_as_associated_data_too():
    # Even under the right key, a token sealed with another route's associated data fails.
    aead = route_aead(SECRET, ROUTE)
    token = seal(aead, OTHER_ROUTE, BOUND)
    with pytest.raises(SealError):
        unseal(aead, ROUTE, token)


def test_no_single_changed_byte_opens():
    raw = raw_of(sealed())
    aead = route_aead(SECRET, ROUTE)
    for at in range(len(raw)):
        changed = raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1 :]
        with pytest.raises(SealError):
            unseal(aead, ROUTE, token_of(changed))


@pytest.mark.parametrize(
    ("token", "words"),
    [
        (INNER, "not a DPoP-bound token of this gateway"),
        (SEALED_PREFIX + "not base64!", "not base64url"),
        (SEALED_PREFIX + "AQID", "cut short"),
        (token_of(b"\x02" + bytes(40)), "unknown version"),
        (SEALED_PREFIX + "A" * MAX_SEALED_CHARS, "not a DPoP-bound token"),
        (SEALED_PREFIX + "é", "not base64url"),
    ],
    ids=["a JWT", "not base64url", "too short", "another version", "too long", "not ASCII"],
)
def test_malformed_tokens_are_refused_saying_why(token: str, words: str):
    with pytest.raises(SealError, match=words):
        unseal(route_aead(SECRET, ROUTE), ROUTE, token)


async def test_the_seal_reads_the_secret_once_and_remembers_what_it_opened():
    reads = []

    async def secret() -> bytes:
        reads.append(1)
        return SECRET

    tokens = TokenSeal(secret, opened_entries=2)
    first = await tokens.seal(ROUTE, BOUND)
    assert await tokens.open(ROUTE, first) == BOUND
    assert await tokens.open(ROUTE, first) == BOUND
    assert len(reads) == 1  # the route's key derived once
    # Remembered by route and token: the same token at another route is opened (and refused)
    # there, never answered from what this route opened.
    with pytest.raises(SealError):
        await tokens.open(OTHER_ROUTE, first)
    # Bounded: the oldest entry goes; every token still opens, from its seal.
    for _ in range(3):
        token = await tokens.seal(ROUTE, BOUND)
        assert await tokens.open(ROUTE, token) == BOUND
    assert len(tokens._opened) == 2
    assert await tokens.open(ROUTE, first) == BOUND


async def test_tokens_of_one_seal_open_with_another_seal_of_the_same_secret():
    # Replicas: each derives the same key from the store's shared secret.
    async def secret() -> bytes:
        return SECRET

    token = await TokenSeal(secret).seal(ROUTE, BOUND)
    assert await TokenSeal(secret).open(ROUTE, token) == BOUND
