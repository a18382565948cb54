"""Consent remembered per browser: a signed cookie listing the clients the user allowed, each at
the provider it was allowed at, the cookie that ties a consent page to the browser that opened
it, and the check that a consent answer was posted from the gateway's own page."""

from __future__ import annotations

import hashlib
import hmac

from ..asgi import Scope, header, request_origin

REMEMBERED = 20  # clients per cookie


def cookie_names(origin: str) -> tuple[str, str, str]:
    """(consent cookie, browser cookie, attribute suffix) for a gateway origin."""
    # `__Host-` needs Secure, which browsers only keep for https origins.
    secure = origin.startswith("https://")
    prefix = "__Host-" if secure else ""
    return f"{prefix}mcp-consent", f"{prefix}mcp-authz", "; Secure" if secure else ""


def client_digest(client_id: str, provider: int) -> str:
    """What the consent cookie records of a client allowed at a provider (its providers[]
    index): "sign in with A" is not consent to act for the account at B, whoever holds it."""
    return hashlib.sha256(f"{provider}:{client_id}".encode()).hexdigest()[:16]


def _signature(secret: bytes, body: str) -> str:
    return hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()[:32]


def read_consent(secret: bytes, value: str | None) -> list[str]:
    """The clients a valid consent cookie lists (none when absent or tampered with)."""
    if not value or "." not in value:
        return []
    body, _, signature = value.rpartition(".")
    if not hmac.compare_digest(signature, _signature(secret, body)):
        return []
    return [d for d in body.split("-") if d]


def write_consent(secret: bytes, digests: list[str]) -> str:
    """A consent cookie value for these clients (the most recent ones)."""
    body = "-".join(digests[-REMEMBERED:])
    return f"{body}.{_signature(secret, body)}"


def cross_origin(scope: Scope) -> str | None:
    """Why a consent POST did not come from the gateway's own page, or None."""
    origin = header(scope, b"origin")
    own = request_origin(scope)
    if origin is None:
        # Browsers that send no Origin still send Fetch Metadata, which pages cannot forge.
        if header(scope, b"sec-fetch-site") == b"same-origin":
            return None
        return (
            "the consent form must be posted from the gateway's own page (no Origin "
            "header and no Sec-Fetch-Site: same-origin)"
        )
    posted_from = origin.decode("latin-1")
    if posted_from == own:
        return None
    hint = ""
    if posted_from.partition("://")[2] == own.partition("://")[2]:
        hint = (
            "; if a proxy in front of the gateway terminates TLS, start the gateway with "
            "--trust-forwarded-headers"
        )
    return (
        f"the consent form was posted from {posted_from[:100]!r}, not from the "
        f"gateway's own origin {own!r}{hint}"
    )
