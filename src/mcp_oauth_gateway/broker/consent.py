"""Consent remembered per browser: a signed cookie per Broker route listing what the user allowed
there, the cookie that ties a consent page to the browser that opened it, and the check that a
consent answer was posted from the gateway's own page.

What is remembered is exactly one request: this route, this provider, this client, this redirect
URI and this set of scopes. Any other set of scopes, narrower ones too, is asked again (a wider
one would let a client step up, or add `offline_access`, unseen). Consent for a redirect URI that
any program on the user's device could receive is never remembered (`unattended_by`): a loopback
address, whose port may change at every request (RFC 8252 §7.3) and where any local program may
listen, and a private-use URI scheme, which any app may claim (RFC 8252 §8.6)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

import orjson

from ..asgi import Scope, header, request_origin
from ..gateway_cookies import BROWSER_COOKIE, CONSENT_COOKIE
from ..oauth_scopes import scope_tokens
from ..urls import InvalidUri, parse_redirect_uri

REMEMBERED = 20  # requests per cookie (of one route)
# 0.0.0.0/8 is "this host" to the socket API: a browser connecting there reaches local programs.
_THIS_HOST = ipaddress.ip_network("0.0.0.0/8")


def cookie_names(origin: str, route: str) -> tuple[str, str, str]:
    """(consent cookie of the route, browser cookie, attribute suffix) for a gateway origin: one
    consent cookie per route, so routes that share a host (and browsers, which send a host's
    cookies to every port) never overwrite or push out each other's."""
    # `__Host-` needs Secure, which browsers only keep for https origins.
    secure = origin.startswith("https://")
    prefix = "__Host-" if secure else ""
    return (
        f"{prefix}{CONSENT_COOKIE}{route[:16]}",
        f"{prefix}{BROWSER_COOKIE}",
        "; Secure" if secure else "",
    )


def consent_digest(
    route: str,
    provider: tuple[int, str],
    client_id: str,
    redirect_uri: str,
    scope: str,
) -> str:
    """What the consent cookie records of one allowed request: the route, the provider (its
    providers[] index and issuer: "sign in with A" is not consent to act for the account at B),
    the client, its exact redirect URI and the set of scopes it asked for."""
    scopes = sorted(set(scope_tokens(scope)))
    what = [route, provider[0], provider[1], client_id, redirect_uri, scopes]
    return hashlib.sha256(orjson.dumps(what)).hexdigest()[:32]


def unattended_by(redirect_uri: str) -> str | None:
    """Why consent for a sign-in that ends at `redirect_uri` is never remembered (some program on
    the user's device other than the client could be the one receiving it), or None."""
    try:
        parsed = parse_redirect_uri(redirect_uri)
    except InvalidUri:
        return "a redirect URI that cannot be read"  # never reached: it was checked before
    if parsed.scheme not in ("http", "https"):
        return f"the private-use URI scheme {parsed.scheme}:, which any app may claim"
    if loopback_host(parsed.hostname):
        return "a loopback redirect URI, where any program on this device may listen"
    return None


def loopback_host(hostname: str) -> bool:
    """Whether a URL host names this device: `localhost` and its subdomains, 127.0.0.0/8, ::1,
    the unspecified addresses and IPv6 forms that carry one of those IPv4 addresses."""
    host = hostname.strip("[]").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        if address.is_loopback or address.is_unspecified:
            return True
        mapped = address.ipv4_mapped
        if mapped is None and int(address) >> 32 == 0:
            mapped = ipaddress.IPv4Address(int(address))  # IPv4-compatible (::a.b.c.d)
        if mapped is None:
            return False
        address = mapped
    return address.is_loopback or address in _THIS_HOST


def _signature(secret: bytes, body: str) -> str:
    return hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()[:32]


def read_consent(secret: bytes, value: str | None) -> list[str]:
    """The requests a valid consent cookie lists (none when absent or tampered with)."""
    if not value or "." not in value:
        return []
    body, _, signature = value.rpartition(".")
    if not hmac.compare_digest(signature, _signature(secret, body)):
        return []
    return [d for d in body.split("-") if d]


def write_consent(secret: bytes, digests: list[str]) -> str:
    """A consent cookie value for these requests (the most recent ones)."""
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
