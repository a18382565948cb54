"""Request header rules checked once, at the entry, before any stage reads a header.

A header the gateway authenticates, routes on or sets must mean one thing: stages read the first
value of a header while a backend may read the last (or all of them), so a second copy is a way to
show the gateway one value and the backend another. Such requests are refused, never repaired.
"""

from __future__ import annotations

import re

from .. import audit
from ..asgi import ASGIApp, Headers, Receive, Scope, Send, first_item, send_error

# Headers some stage reads (or the gateway sets on the way to the backend): at most one each.
SINGLE = frozenset(
    {
        b"authorization",  # authentication
        b"host",  # routing, and every URL the gateway builds for the client
        b"origin",
        b"access-control-request-method",
        b"access-control-request-headers",  # CORS
        b"sec-fetch-site",
        b"cookie",  # the Broker's browser pages
        b"content-type",
        b"content-length",  # body framing, MCP message reading
        b"x-request-id",  # logged, forwarded, returned
        b"traceparent",
        b"tracestate",  # tracing context handed to the backend
    }
)
# Trusted only with --trust-forwarded-headers; otherwise the gateway drops and sets them itself.
FORWARDED = frozenset({b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"forwarded"})
# MCP headers (Mcp-Method, Mcp-Name, Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Param-*): the
# tool-level authorization compares some of them with the body, the backend routes on the others.
MCP_PREFIX = b"mcp-"

# A host name (letters, digits, '-', '.', and '_' as container runtimes name services), an IPv4
# address or a bracketed IPv6 literal, with an optional port: nothing else may become part of the
# URLs the gateway writes into metadata, challenges and redirects.
_HOST = re.compile(rb"(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
_PROTO = frozenset({b"http", b"https"})
MAX_REMEMBERED_HOSTS = 256


def underscore_alias(name: bytes, guarded: frozenset[bytes]) -> bytes | None:
    """The guarded header `name` stands for if `_` is read as `-`, or None.

    CGI-style servers (WSGI's `HTTP_X_USER`, PHP, many frameworks) map `X_User` and `X-User` to
    the same variable, so `X_User` would smuggle past a rule about `X-User`."""
    if b"_" not in name:
        return None
    dashed = name.replace(b"_", b"-")
    return dashed if dashed in guarded or dashed.startswith(MCP_PREFIX) else None


def hop_by_hop_guarded(connection: bytes, guarded: frozenset[bytes]) -> bytes | None:
    """A guarded header that a `Connection` header value names, or None.

    Headers named in `Connection` are dropped before proxying (RFC 9110 §7.6.1), so naming one
    the gateway set (a transformation header, X-Forwarded-For) would remove it."""
    for token in connection.lower().split(b","):
        name = token.strip()
        if name in guarded or name.startswith(MCP_PREFIX):
            return name
    return None


def display_name(name: bytes) -> str:
    """`x-request-id` → `X-Request-Id`, as people write header names."""
    text = name.decode("latin-1")
    joiner = "_" if "_" in text else "-"
    return joiner.join(part.capitalize() for part in text.split(joiner))


class HeaderRules:
    """The entry check for one gateway process (which headers are trusted is fixed at start)."""

    def __init__(self, trust_forwarded: bool):
        self.single = SINGLE | FORWARDED if trust_forwarded else SINGLE
        self.trust_forwarded = trust_forwarded
        # Aliases are refused whether or not forwarded headers are trusted: untrusted ones are
        # dropped by name, so an alias would outlive the drop.
        self.aliased = SINGLE | FORWARDED
        # Host and Connection values already found valid: a gateway sees few (clients send
        # `Connection: keep-alive`), and the check runs per request.
        self._good_hosts: set[bytes] = set()
        self._good_connections: set[bytes] = set()

    def problem(self, headers: Headers) -> str | None:
        """Why the request's headers cannot be served, or None."""
        # One dict built in C answers the common case (no header twice) and, once repeats of
        # guarded headers are ruled out, gives their single values.
        values = dict(headers)
        if len(values) != len(headers):
            repeated = self._repeated([name for name, _ in headers])
            if repeated is not None:
                return (
                    f"the request carries more than one {display_name(repeated)} header; "
                    "send it once"
                )
        if b"_" in b"\0".join(values):
            for name in [n for n in values if b"_" in n]:
                alias = underscore_alias(name, self.aliased)
                if alias is not None:
                    return (
                        f"the header {display_name(name)} would be read as "
                        f"{display_name(alias)} by some servers; send {display_name(alias)}"
                    )
        if b"connection" in values:
            # Every Connection header counts: the proxy drops what any of them names.
            for name, value in headers:
                if name != b"connection" or value in self._good_connections:
                    continue
                named = hop_by_hop_guarded(value, self.aliased)
                if named is not None:
                    return (
                        f"the Connection header names {display_name(named)}, which the "
                        "gateway reads or sets; it cannot be made hop-by-hop (dropped on "
                        "the way to the backend)"
                    )
                if len(self._good_connections) < MAX_REMEMBERED_HOSTS:
                    self._good_connections.add(value)
        host = values.get(b"host")
        if host is not None and host not in self._good_hosts:
            if not _HOST.fullmatch(host):
                return f"the Host header {host[:100]!r} is not a host name or address with a port"
            if len(self._good_hosts) < MAX_REMEMBERED_HOSTS:
                self._good_hosts.add(host)
        if self.trust_forwarded:
            forwarded_host = values.get(b"x-forwarded-host")
            if forwarded_host is not None and not _HOST.fullmatch(first_item(forwarded_host)):
                return (
                    f"the X-Forwarded-Host header {forwarded_host[:100]!r} is not a host name "
                    "or address with a port"
                )
            forwarded_proto = values.get(b"x-forwarded-proto")
            if forwarded_proto is not None and first_item(forwarded_proto).lower() not in _PROTO:
                return (
                    f"the X-Forwarded-Proto header {forwarded_proto[:100]!r} is neither http "
                    "nor https"
                )
        return None

    def _repeated(self, names: list[bytes]) -> bytes | None:
        seen: set[bytes] = set()
        for name in names:
            if name in self.single or name.startswith(MCP_PREFIX):
                if name in seen:
                    return name
                seen.add(name)
        return None


class OwnedHeaders:
    """The same rule for the headers one route's stages set for the backend (transformations,
    the backend's credentials and identity): checked once, before any stage runs.

    Each setting stage drops the client's copies of its headers; what it cannot see is a copy
    under another name (`X_Api_Key`, read as `X-Api-Key` by CGI-style servers) or a `Connection`
    header naming its header (the proxy would drop the gateway's value on the way out). Both are
    refused, as is a client copy of a header the route sets sent more than once."""

    def __init__(self, app: ASGIApp, sets: frozenset[bytes], removes: frozenset[bytes]):
        self.app = app
        self.sets = sets
        self.guarded = sets | removes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        problem = self.problem(scope["headers"])
        if problem is not None:
            audit.deny(scope, "owned-headers", problem)
            await send_error(send, 400, "invalid_request", problem)
            return
        await self.app(scope, receive, send)

    def problem(self, headers: Headers) -> str | None:
        """Why `headers` could make a header this route sets mean two things, or None."""
        seen: set[bytes] = set()
        for name, value in headers:
            if name == b"connection":
                named = hop_by_hop_guarded(value, self.guarded)
                if named is not None:
                    return (
                        f"the Connection header names {display_name(named)}, which this "
                        "route sets or removes itself"
                    )
            if name in self.sets:
                if name in seen:
                    # The gateway sets it: two copies mean a client tried to supply one.
                    return (
                        f"the request carries more than one {display_name(name)} header, "
                        "which this route sets itself; send it at most once"
                    )
                seen.add(name)
            alias = underscore_alias(name, self.guarded)
            if alias is not None:
                return (
                    f"the header {display_name(name)} would be read as "
                    f"{display_name(alias)} by some servers, and this route sets or removes "
                    f"{display_name(alias)} itself"
                )
        return None
