"""PKCE (RFC 7636) S256, shared by the broker and the dev identity provider."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets


def s256(verifier: str) -> str:
    """The S256 code challenge of a verifier."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def new_verifier() -> str:
    """A fresh 64-character verifier."""
    return secrets.token_urlsafe(48)


def verify(verifier: str, challenge: str) -> bool:
    """Constant-time check of a verifier against its S256 challenge."""
    if not verifier or not 43 <= len(verifier) <= 128:
        return False
    try:
        return hmac.compare_digest(s256(verifier), challenge)
    except UnicodeEncodeError:
        return False
