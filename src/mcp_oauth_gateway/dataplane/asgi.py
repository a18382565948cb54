"""ASGI types and the few header helpers every stage shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

# Scope keys the pipeline stages hand to each other.
CLAIMS_KEY = "mcp_oauth_gateway.jwt"
TOKEN_KEY = "mcp_oauth_gateway.token"


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (`name` in lowercase), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None
