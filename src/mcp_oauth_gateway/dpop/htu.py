"""The `htu` of a DPoP proof: the URL the client used, without query and fragment (RFC 9449
§4.2, §4.3 check 9), compared after RFC 3986 §6.2.2 and §6.2.3 normalization on both sides.

Both the request's URL and the proof's claim are read by the WHATWG parser browsers and Node
use (`ada-url`, as in `urls.py`): it lowercases the scheme and host, converts international
host names to their `xn--` form, drops the scheme's default port, writes an empty path as `/`
and resolves `.` and `..` segments (plain or percent-encoded). What it leaves as written is
finished here, on the path alone: percent-encoded unreserved characters are decoded (`%7E` is
`~`, `%41` is `A`) and the hex digits of the others are uppercased (`%2f` is `%2F`), so two
spellings of one URL compare equal and nothing else does.

A trailing dot on the host (`example.com.`) is kept: RFC 3986 does not remove it, and for HTTP
it is another authority (another `Host` header, TLS name and origin); a client that used it
names it in `htu` and the gateway sees it in `Host`.
"""

from __future__ import annotations

import functools
import re

import ada_url

from .errors import refused, shown

_SCHEMES = frozenset({"http:", "https:"})
_PERCENT = re.compile("%([0-9A-Fa-f]{2})")
# RFC 3986 §2.3: ALPHA / DIGIT / "-" / "." / "_" / "~".
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _percent(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def _normalized(url: ada_url.URL) -> str:
    """`scheme://host[:port]/path` of a parsed http(s) URL, query and fragment left out."""
    return url.protocol + "//" + url.host + _PERCENT.sub(_percent, url.pathname)


@functools.lru_cache(maxsize=1024)
def htu_of(scheme: str, host: str, path: str) -> str:
    """The normalized URL a request was sent to: `scheme` and `host` as the client used them
    (through trusted forwarded headers), `path` as received, still percent-encoded (the ASGI
    `raw_path`, not the decoded `path`). DpopError when they do not make an http(s) URL."""
    what = f"the request URL {shown(f'{scheme}://{host}{path}')}"
    if not path.startswith("/") or "?" in path or "#" in path:
        raise refused(f"{what} has no path a proof can name")
    try:
        # The host alone first: a Host header holding `/`, `?`, `#`, `\` or `@` would move
        # part of itself into the path, query or user information of the whole URL.
        authority = ada_url.URL(f"{scheme}://{host}/")
        url = ada_url.URL(f"{scheme}://{host}{path}")
    except ValueError as exc:
        raise refused(f"{what} is not a valid URL") from exc
    if (
        authority.protocol not in _SCHEMES
        or authority.pathname != "/"
        or authority.username
        or authority.password
        or authority.search
        or authority.hash
        or url.host != authority.host
    ):
        raise refused(f"{what} does not name an http or https host")
    return _normalized(url)


@functools.lru_cache(maxsize=1024)
def normalize_htu(claim: str) -> str:
    """A proof's `htu` claim normalized like `htu_of`, its query and fragment ignored;
    DpopError saying why when it is not an absolute http(s) URL without user information.
    (Cached: a client names the same few URLs in all its proofs.)"""
    try:
        url = ada_url.URL(claim)
    except ValueError as exc:
        raise refused(f"the DPoP proof's htu {shown(claim)} is not an absolute URL") from exc
    if url.protocol not in _SCHEMES:
        raise refused(f"the DPoP proof's htu {shown(claim)} is not an http or https URL")
    if url.username or url.password:
        raise refused(
            f"the DPoP proof's htu {shown(claim)} has user information ('…@') before its host"
        )
    return _normalized(url)
