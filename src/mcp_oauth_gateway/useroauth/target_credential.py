"""A federated target's userOAuth credential: the caller's own token there, got when the
federation talks to the target (its route's stages asked the caller to connect before)."""

from __future__ import annotations

from ..asgi import Headers, Scope
from .access import Unavailable, Upstream
from .runtime import UserOAuthRuntime
from .stage import caller_key

AUTHORIZATION = b"authorization"


class NotConnected(Exception):
    """The caller has no usable token for the target (now)."""


class UserOAuthCredential:
    """Gives one target the caller's own upstream token."""

    owned = frozenset({AUTHORIZATION})

    def __init__(self, upstream: Upstream, backend: str, runtime: UserOAuthRuntime):
        self.upstream = upstream
        self.backend = backend
        self.runtime = runtime

    async def headers(self, scope: Scope) -> Headers:
        """`Authorization: Bearer <token>`; NotConnected when there is none."""
        key = caller_key(scope, self.backend)
        if key is None:
            raise NotConnected(f"{self.upstream.service} needs a signed-in caller")
        try:
            outcome = await self.runtime.access.token(key, self.upstream)
        except Unavailable as exc:
            raise NotConnected(str(exc)) from None
        if outcome.token is None:
            raise NotConnected(f"the caller has not connected {self.upstream.service}")
        return [(AUTHORIZATION, b"Bearer " + outcome.token.encode())]
