"""The cookies the gateway sets for itself (the Broker's consent cookie of each route, the
cookie that ties a consent page to its browser, the user-OAuth connect flow's and connections
page's): never handed to a backend, never set by one.

Routes of several tenants can share a host, and browsers send a host's cookies to every path
and port of it: without this, any tenant's MCP server would read the consent and browser cookies
of every other tenant's users, and could overwrite or delete them with its own `Set-Cookie`.
"""

from __future__ import annotations

CONSENT_COOKIE = "mcp-consent-"
BROWSER_COOKIE = "mcp-authz"
# The user-OAuth connect flow's browser binding, and the connections page's sign-in.
CONNECT_COOKIE = "mcp-connect"
CONNECTIONS_COOKIE = "mcp-connections"
# Browsers keep `__Host-`/`__Secure-` cookies apart from the bare name; refusing every spelling
# (in any case) costs nothing, since none is a backend's to read or set.
_PREFIXES = (b"__host-", b"__secure-")


def is_gateways(name: bytes) -> bool:
    """Whether a cookie name is (a spelling of) one the gateway sets for itself."""
    lowered = name.strip().lower()
    for prefix in _PREFIXES:
        lowered = lowered.removeprefix(prefix)
    return (
        lowered.startswith(CONSENT_COOKIE.encode())
        or lowered == BROWSER_COOKIE.encode()
        or lowered.startswith(CONNECT_COOKIE.encode())
    )


def without_gateway_cookies(header: bytes) -> bytes | None:
    """A `Cookie` header without the gateway's cookies (None when nothing else is left)."""
    if b"mcp-" not in header.lower():
        return header  # the usual case: one scan, no copy
    kept = [pair for pair in header.split(b";") if not is_gateways(pair.partition(b"=")[0])]
    joined = b";".join(kept).strip()
    return joined or None


def sets_gateway_cookie(set_cookie: bytes) -> bool:
    """Whether a `Set-Cookie` value would set (or clear) one of the gateway's cookies."""
    return is_gateways(set_cookie.partition(b";")[0].partition(b"=")[0])
