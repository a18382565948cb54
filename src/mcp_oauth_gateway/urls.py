"""URLs the gateway compares, stores or redirects to, read the way browsers read them.

Browsers parse URLs with the WHATWG URL Standard, which disagrees with RFC 3986 parsers such as
`urllib.parse` on backslashes, tabs and newlines, `@` in odd places, percent-encoded dots, IPv4
shorthands and IDNA. A redirect URI checked with one parser and followed by a browser with another
is how an authorization code ends up on another host, so every decision here is made on the
WHATWG reading (the `ada-url` package: the parser Node uses), and a URI is accepted only when it is
already written the way a browser would write it back, leaving nothing to interpretation.

`shown_url` is how any URL, configured or fetched, is written where people or scrapers read it
(errors, conditions, logs, metrics, admin pages): by what may be shown, never its user-info or
query values; the URL the gateway connects to is never the shown one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlsplit

import ada_url

MAX_URI_LENGTH = 2048
# Schemes that run or read something in the browser instead of navigating to a client.
FORBIDDEN_SCHEMES = frozenset(
    {"javascript", "data", "file", "vbscript", "about", "blob", "filesystem", "view-source"}
)
# RFC 8252 §7.3 loopback redirects: any port at request time. `localhost` is NOT RECOMMENDED
# there but is what several MCP clients register, so it is treated like the IP literals.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "[::1]", "localhost"})
# Browsers drop tabs and newlines and trim spaces and control characters; a backslash is a slash
# in special schemes; `#` starts a fragment, which redirect URIs must not have (RFC 6749 §3.1.2).
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\#]")
# What is shown instead of a secret, or of a URL that cannot be taken apart safely.
HIDDEN = "***"


class InvalidUri(ValueError):
    """A URI the gateway will not store, compare or redirect to; the message says why."""


@dataclass(frozen=True, slots=True)
class RedirectUri:
    """A validated redirect URI and the parts matching needs."""

    href: str  # the WHATWG serialization: what a browser navigates to
    scheme: str  # without the colon
    hostname: str  # IPv6 literals keep their brackets
    path_and_query: str
    loopback: bool  # http on a loopback host: the port may vary (RFC 8252)


def _unsafe_reason(text: str) -> str | None:
    found = _UNSAFE.search(text)
    if found is None:
        return (
            None
            if text.isascii()
            else "non-ASCII characters (percent-encode them, and "
            "write international host names in their xn-- form)"
        )
    char = found.group()
    if char == "\\":
        return "a backslash (browsers read it as '/')"
    if char == "#":
        return "a fragment ('#')"
    return f"the control or space character {char!r}"


def _read(text: str, what: str) -> ada_url.URL:
    """`text` as browsers read it, after refusing what they would silently drop or rewrite
    (control characters, backslashes, fragments) and what carries credentials."""
    shown = repr(text[:200])
    if len(text) > MAX_URI_LENGTH:
        raise InvalidUri(f"{what} {shown}… is longer than {MAX_URI_LENGTH} characters")
    unsafe = _unsafe_reason(text)
    if unsafe is not None:
        raise InvalidUri(f"{what} {shown} contains {unsafe}")
    try:
        url = ada_url.URL(text)
    except ValueError as exc:
        raise InvalidUri(f"{what} {shown} is not a valid absolute URL") from exc
    if url.username or url.password:
        # Quoted without it: a password is what user information usually holds.
        raise InvalidUri(
            f"{what} {shown_url(text[:200])!r} has user information ('…@') before its host"
        )
    return url


def parse_redirect_uri(text: object) -> RedirectUri:
    """Validate a redirect URI (RFC 6749 §3.1.2, RFC 8252, MCP); raise InvalidUri saying why."""
    if not isinstance(text, str) or not text:
        raise InvalidUri("redirect URIs must be non-empty strings")
    url = _read(text, "redirect URI")
    shown = repr(text[:200])
    scheme = url.protocol[:-1]
    if scheme in FORBIDDEN_SCHEMES:
        raise InvalidUri(f"redirect URI {shown} uses the forbidden scheme {scheme}:")
    if scheme in ("http", "https") and not url.hostname:
        raise InvalidUri(f"redirect URI {shown} has no host")
    href = url.href
    # The one difference allowed: an empty path, which browsers write as "/".
    if href not in (text, text + "/"):
        raise InvalidUri(
            f"redirect URI {shown} is not written the way browsers read it "
            f"({href!r}); register and send {href!r}"
        )
    loopback = scheme == "http" and url.hostname in LOOPBACK_HOSTS
    if scheme == "http" and not loopback:
        raise InvalidUri(
            f"redirect URI {shown} uses http on a host that is not loopback; use "
            "https, or http://127.0.0.1, http://[::1] or http://localhost"
        )
    return RedirectUri(
        href=href,
        scheme=scheme,
        hostname=url.hostname,
        path_and_query=url.pathname + url.search,
        loopback=loopback,
    )


def parse_document_url(text: str, allow_http: bool) -> str:
    """A Client ID Metadata Document URL (https, a path, nothing a browser would rewrite) as
    its WHATWG serialization; raise InvalidUri saying why not."""
    url = _read(text, "client_id")
    shown = repr(text[:200])
    if url.protocol != "https:" and not (allow_http and url.protocol == "http:"):
        raise InvalidUri(f"client_id {shown} must be an https URL")
    if url.pathname in ("", "/"):
        raise InvalidUri(f"client_id {shown} has no path (a metadata document URL needs one)")
    if url.href != text:
        raise InvalidUri(
            f"client_id {shown} is not written the way browsers read it ({url.href!r})"
        )
    return url.href


def redirect_matches(registered: tuple[str, ...], requested: RedirectUri) -> bool:
    """Exact match on the browser's reading, except that loopback redirects may change port."""
    for uri in registered:
        try:
            have = parse_redirect_uri(uri)
        except InvalidUri:
            # Registered before these rules existed: it can never match.
            continue
        if have.href == requested.href:
            return True
        if (
            requested.loopback
            and have.loopback
            and have.hostname == requested.hostname
            and have.path_and_query == requested.path_and_query
        ):
            return True
    return False


def origin_of(text: str) -> str | None:
    """`scheme://host[:port]` of a URL as browsers serialize it, or None (no such origin)."""
    try:
        origin = ada_url.URL(text).origin
    except ValueError:
        return None
    return None if origin in ("", "null") else origin


def navigable(text: object) -> str | None:
    """The WHATWG serialization of an http(s) URL taken from elsewhere (a provider's metadata),
    safe to put in a Location header; None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        url = ada_url.URL(text)
    except ValueError:
        return None
    if url.protocol not in ("http:", "https:") or url.username or url.password or url.hash:
        return None
    return url.href


def with_query(href: str, params: str) -> str:
    """`href` (a WHATWG serialization without fragment) with encoded `params` added."""
    return f"{href}{'&' if '?' in href else '?'}{params}"


def hostname_of(href: str) -> str:
    """The WHATWG host name of an already validated URL (IPv6 literals in brackets)."""
    return ada_url.URL(href).hostname


def shown_url(url: str) -> str:
    """`url` as a person or a scraper may see it: scheme, host, port, path and query keys; the
    user information and every query value as `***`, no fragment; `***` if it does not parse."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
        query = _query_keys(parts.query)
    except ValueError:
        return HIDDEN
    # An `@` after the authority means a user-info cut short by a `/`, `?` or `#` in it (a
    # password written unencoded): its rest would be shown as path or query.
    if not url.isprintable() or "@" in parts.path + parts.query + parts.fragment:
        return HIDDEN
    _, at, host_port = parts.netloc.rpartition("@")
    authority = HIDDEN + "@" + host_port if at else host_port
    shown = f"{parts.scheme}:" if parts.scheme else ""
    if authority or url[len(shown) :].startswith("//"):
        shown += "//" + authority
    return shown + parts.path + (f"?{query}" if query else "")


def _query_keys(query: str) -> str:
    """The query's keys, each value `***` (redis-py reads a password there, JWKS endpoints
    keys); ValueError for an item that is not `key=value`, which could be a secret itself."""
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    return "&".join(f"{quote(key, safe='')}={HIDDEN}" for key, _ in pairs)
