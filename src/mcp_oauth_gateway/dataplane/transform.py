"""Request header transformations computed from the verified claims (CEL), applied after
authorization. Incoming headers of the same names are always dropped first, so a client can never
supply a value the gateway is meant to set."""

from __future__ import annotations

import logging

from ..asgi import CLAIMS_KEY, ASGIApp, Headers, Receive, Scope, Send, send_error
from ..controlplane.cel import value_of
from ..controlplane.snapshot import CompiledTransformation
from .authz import request_variables
from .headers import display_name, hop_by_hop_guarded, underscore_alias

log = logging.getLogger("mcp_oauth_gateway.transform")
_FORBIDDEN = (b"\r", b"\n", b"\x00")


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
        self.guarded = frozenset(self.drop)
        self.needs_request = any(e.uses_request for _, e in self.set)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        problem = self._problem(scope["headers"])
        if problem is not None:
            await send_error(send, 400, "invalid_request", problem)
            return
        activation: dict[str, object] = {"jwt": scope.get(CLAIMS_KEY, {})}
        if self.needs_request:
            activation["request"] = request_variables(scope)
        added = []
        for name, expression in self.set:
            value = header_value(value_of(expression, activation))
            if value is None:
                # A missing claim leaves the header unset rather than set to something wrong.
                continue
            if any(c in value for c in _FORBIDDEN):
                log.warning(
                    "transformation %s produced a value with CR/LF/NUL; refused", name.decode()
                )
                await send_error(
                    send,
                    400,
                    "invalid_request",
                    f"the value computed for header {name.decode()} contains control characters",
                )
                return
            added.append((name, value))
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k not in self.drop] + added
        await self.app(scope, receive, send)

    def _problem(self, headers: Headers) -> str | None:
        seen: set[bytes] = set()
        for name, value in headers:
            if name == b"connection":
                named = hop_by_hop_guarded(value, self.guarded)
                if named is not None:
                    return (
                        f"the Connection header names {display_name(named)}, which this "
                        "route sets or removes itself"
                    )
            if name in self.set_names:
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
