"""Request header transformations computed from the verified claims (CEL), applied after
authorization. Incoming headers of the same names are always dropped first, so a client can never
supply a value the gateway is meant to set; copies under other names (underscore aliases, names
in `Connection`) are refused for every header a route sets, by `headers.OwnedHeaders`."""

from __future__ import annotations

import logging

from .. import audit
from ..asgi import TOKEN_KEY, ASGIApp, Headers, Receive, Scope, Send, send_error
from ..controlplane.cel import claims_read, value_of
from ..controlplane.snapshot import CompiledTransformation
from .authz import activation_for
from .bounded import BoundedCache, per_token

log = logging.getLogger("mcp_oauth_gateway.transform")
_FORBIDDEN = (b"\r", b"\n", b"\x00")
# Tokens whose computed headers are remembered (values over the claims alone never change).
VALUES_MEMO = 10_000


def header_value(value: object) -> bytes | None:
    """A CEL result as a header value; None when it cannot be one (lists, maps, errors)."""
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int | float):
        return str(value).encode()
    if isinstance(value, str):
        return value.encode("utf-8")
    return None


class HeaderTransformation:
    """Sets and removes request headers before the request is proxied."""

    def __init__(self, app: ASGIApp, transformation: CompiledTransformation):
        self.app = app
        self.set = transformation.set
        self.set_names = frozenset(name for name, _ in transformation.set)
        self.drop = transformation.remove | self.set_names
        self.needs_request = any(e.uses_request for _, e in self.set)
        self.claims = claims_read(e for _, e in self.set)
        # token → the headers to add, or the name of one whose value cannot be a header.
        self._values: BoundedCache[str, Headers | bytes] | None = (
            None if self.needs_request else BoundedCache(VALUES_MEMO)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        added = self._added(scope)
        if isinstance(added, bytes):
            log.warning(
                "transformation %s produced a value with CR/LF/NUL; refused", added.decode()
            )
            why = f"the value computed for header {added.decode()} contains control characters"
            audit.deny(scope, "header-transformation", why)
            await send_error(send, 400, "invalid_request", why)
            return
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k not in self.drop] + added
        await self.app(scope, receive, send)

    def _added(self, scope: Scope) -> Headers | bytes:
        """The headers to set, or the name of one whose value has CR, LF or NUL; remembered
        per token when every value reads the claims alone."""
        return per_token(
            self._values,
            scope.get(TOKEN_KEY),
            lambda: self._values_of(activation_for(scope, self.claims, self.needs_request)),
        )

    def _values_of(self, activation: dict[str, object]) -> Headers | bytes:
        added: Headers = []
        for name, expression in self.set:
            value = header_value(value_of(expression, activation))
            if value is None:
                # A missing claim leaves the header unset rather than set to something wrong.
                continue
            if any(c in value for c in _FORBIDDEN):
                return name
            added.append((name, value))
        return added
