"""Access tokens the Broker binds to a client's DPoP key itself (RFC 9449 §6), for providers
whose own tokens are bearer tokens: the provider's token, the key's thumbprint (`jkt`) and the
provider's index, sealed together with AES-256-GCM (`cryptography`'s AEAD) into an opaque
token that only the gateway reads.

The key is derived from the Broker store's secret (HKDF-SHA-256) with the route key as
context, and the route key is also the associated data: a token opens at the route that issued
it and at no other, on every replica that shares the store, with nothing stored per token, and
a token of another deployment (another secret) or one changed by a single bit opens nowhere.
What is inside is checked as the provider's token always is (signature, issuer, audience,
expiry), so a sealed token never outlives the token it holds.

The provider's token never reaches the client: a thief of the sealed token has a token that
works only with proofs by the key (the route holds it to `jkt`), and nothing the provider
would take. Each token has a random 96-bit nonce; a route key would have to seal some 2^32
tokens before two nonces were likely to meet (NIST SP 800-38D §8.3), which no route does
within its store secret's life.

`seal` and `unseal` are pure (given the route's AEAD); `TokenSeal` reads the secret, keeps the
derived keys and remembers the tokens it opened (bounded), so that a client's next call with
the same token costs a dictionary lookup, as a verified token does.
"""

from __future__ import annotations

import binascii
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from joserfc.util import urlsafe_b64decode, urlsafe_b64encode

# What tells a sealed token from a JWT (which has two dots and starts `eyJ`).
SEALED_PREFIX = "mcpgw-dpop."
_VERSION = b"\x01"
_SALT = b"mcp-oauth-gateway dpop-bound access tokens v1"
_AAD = b"mcp-oauth-gateway dpop-bound access token v1\x00"
_NONCE_BYTES = 12
# A sealed provider token of 12 KiB is longer than any provider issues; a longer one is
# refused before it is decoded.
MAX_SEALED_CHARS = 16 * 1024
_KEYS_KEPT = 64
DEFAULT_OPENED_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class BoundToken:
    """What a sealed token holds: the provider's access token, the thumbprint of the key it is
    bound to, and the provider (its `providers[]` index) that issued it."""

    token: str
    jkt: str
    idp: int


class SealError(Exception):
    """A token that looks sealed and does not open here; the message says why, for a 401."""


def route_aead(secret: bytes, route: str) -> AESGCM:
    """The AEAD of one route's sealed tokens, from the store's secret (pure)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=route.encode()).derive(secret)
    return AESGCM(key)


def seal(aead: AESGCM, route: str, bound: BoundToken) -> str:
    """`bound` sealed for `route` (whose AEAD is `aead`): the token handed to the client."""
    plaintext = orjson.dumps({"at": bound.token, "jkt": bound.jkt, "idp": bound.idp})
    nonce = os.urandom(_NONCE_BYTES)
    sealed = aead.encrypt(nonce, plaintext, _AAD + route.encode())
    return SEALED_PREFIX + urlsafe_b64encode(_VERSION + nonce + sealed).decode("ascii")


def unseal(aead: AESGCM, route: str, token: str) -> BoundToken:
    """What a sealed token holds, when it was sealed for `route` by this deployment and is
    unchanged; SealError otherwise."""
    if not token.startswith(SEALED_PREFIX) or len(token) > MAX_SEALED_CHARS:
        raise SealError("the access token is not a DPoP-bound token of this gateway")
    try:
        raw = urlsafe_b64decode(token[len(SEALED_PREFIX) :].encode("ascii"))
    except (binascii.Error, UnicodeError, ValueError):
        raise SealError("the DPoP-bound access token is not base64url-encoded") from None
    if len(raw) < 1 + _NONCE_BYTES + 16 or raw[:1] != _VERSION:
        raise SealError("the DPoP-bound access token is cut short or of an unknown version")
    nonce, sealed = raw[1 : 1 + _NONCE_BYTES], raw[1 + _NONCE_BYTES :]
    try:
        plaintext = aead.decrypt(nonce, sealed, _AAD + route.encode())
    except InvalidTag:
        raise SealError(
            "the DPoP-bound access token was not issued by this MCP server's authorization "
            "server (or was changed); sign in again here"
        ) from None
    return _bound(plaintext)


def _bound(plaintext: bytes) -> BoundToken:
    """The sealed fields (written by `seal`: anything else is this gateway's own error)."""
    try:
        fields = orjson.loads(plaintext)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        raise SealError("the DPoP-bound access token holds no JSON object")
    token, jkt, idp = fields.get("at"), fields.get("jkt"), fields.get("idp")
    if not isinstance(token, str) or not isinstance(jkt, str) or not isinstance(idp, int):
        raise SealError("the DPoP-bound access token holds no token, key or provider")
    return BoundToken(token, jkt, idp)


class TokenSeal:
    """Seals and opens the DPoP-bound access tokens of the Broker routes of one store, whose
    secret `secret` reads (every replica reads the same one)."""

    def __init__(
        self,
        secret: Callable[[], Awaitable[bytes]],
        opened_entries: int = DEFAULT_OPENED_ENTRIES,
    ):
        self._secret = secret
        self._aeads: OrderedDict[str, AESGCM] = OrderedDict()
        self._opened: OrderedDict[tuple[str, str], BoundToken] = OrderedDict()
        self._opened_entries = opened_entries

    async def _aead(self, route: str) -> AESGCM:
        aead = self._aeads.get(route)
        if aead is None:
            # Kept for a few routes: a route without a resource has one per origin it is
            # reached at, and origins are the client's to name.
            aead = self._aeads[route] = route_aead(await self._secret(), route)
            if len(self._aeads) > _KEYS_KEPT:
                self._aeads.popitem(last=False)
        return aead

    async def seal(self, route: str, bound: BoundToken) -> str:
        """`bound` sealed for `route` (RedisUnavailable while the secret cannot be read)."""
        return seal(await self._aead(route), route, bound)

    async def open(self, route: str, token: str) -> BoundToken:
        """What `token` holds when it was sealed for `route`; SealError otherwise."""
        key = (route, token)
        hit = self._opened.get(key)
        if hit is not None:
            self._opened.move_to_end(key)
            return hit
        bound = unseal(await self._aead(route), route, token)
        self._opened[key] = bound
        if len(self._opened) > self._opened_entries:
            self._opened.popitem(last=False)
        return bound
