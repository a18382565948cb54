"""Server nonces for DPoP proofs (RFC 9449 §8, §9): stateless and rotating, so that every
replica issues and accepts the same ones without storing any.

A nonce is the number of the period it was issued in (`now // period`) and an HMAC-SHA-256 of
that number under a key the replicas share, cut to 128 bits: `base64url(period ‖ tag)`. It is
accepted in the period it was issued in and the next one, so a nonce lives between one and two
periods, and a client that has just been given one is never refused for it at a boundary.

It carries no client identity on purpose: a nonce only proves that a proof was made after the
server said it (no proofs signed in advance by someone who held the key for a while); replays
within its life are stopped by the `jti` cache, and any client may ask for a nonce anyway.

The key given is never used as it is: a key for nonces alone is derived from it (HKDF-SHA-256,
with `context` in its info), so the same secret may serve other purposes (the Broker store's),
and nonces of one context (an authorization server, a resource server) are refused by another,
as RFC 9449 §8 and §9 make nonces each server's own.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from joserfc.util import urlsafe_b64decode, urlsafe_b64encode

DEFAULT_NONCE_PERIOD = 300.0
MIN_KEY_BYTES = 32
_INFO = b"mcp-oauth-gateway dpop-nonce v1\x00"
_PERIOD_BYTES = 8
_TAG_BYTES = 16
# base64url of 24 bytes, without padding.
_NONCE_LENGTH = 32


class DpopNonces:
    """Issues and checks the nonces of one server (`context`), from a key every replica has."""

    def __init__(self, key: bytes, period: float = DEFAULT_NONCE_PERIOD, context: str = ""):
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"a DPoP nonce key needs {MIN_KEY_BYTES} bytes at least")
        if not period > 0:
            raise ValueError("the DPoP nonce period must be a positive number of seconds")
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO + context.encode())
        self._key = hkdf.derive(key)
        self.period = period
        self._last: tuple[int, str] = (-1, "")

    def _number(self, now: float) -> int:
        return int(now // self.period)

    def _tag(self, number: int) -> bytes:
        message = number.to_bytes(_PERIOD_BYTES, "big")
        return hmac.new(self._key, message, hashlib.sha256).digest()[:_TAG_BYTES]

    def issue(self, now: float) -> str:
        """The nonce of the current period (the value of a `DPoP-Nonce` header)."""
        number = self._number(now)
        if self._last[0] != number:
            raw = number.to_bytes(_PERIOD_BYTES, "big") + self._tag(number)
            self._last = (number, urlsafe_b64encode(raw).decode("ascii"))
        return self._last[1]

    def check(self, nonce: str, now: float) -> bool:
        """Whether `nonce` was issued by this server in the current or the previous period."""
        if len(nonce) != _NONCE_LENGTH:
            return False
        try:
            raw = urlsafe_b64decode(nonce.encode("ascii"))
        except (binascii.Error, UnicodeError, ValueError):
            return False
        number = int.from_bytes(raw[:_PERIOD_BYTES], "big")
        if not 0 <= self._number(now) - number <= 1:
            return False
        return hmac.compare_digest(raw[_PERIOD_BYTES:], self._tag(number))
