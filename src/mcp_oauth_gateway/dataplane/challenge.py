"""RFC 6750 `WWW-Authenticate` challenges, written one way for the 401 and the 403."""

from __future__ import annotations

from dataclasses import dataclass

from ..asgi import Scope, Send, quoted_string, request_origin, send_error


def challenge(
    resource_metadata: str | None,
    scope: str | None,
    error: str | None,
    code: str = "invalid_token",
) -> bytes:
    """`Bearer` first (TS clients read only the first token), then error, metadata, scope."""
    params = []
    if error:
        params.append(f'error="{code}", error_description="{quoted_string(error)}"')
    if resource_metadata:
        params.append(f'resource_metadata="{resource_metadata}"')
    if scope:
        params.append(f'scope="{scope}"')
    return ("Bearer " + ", ".join(params)).strip().encode("latin-1", "replace")


@dataclass(frozen=True, slots=True)
class Challenger:
    """What a route's 401 names: its metadata path and the scopes to sign in with."""

    prm_path: str | None
    scope_hint: str | None

    def metadata_url(self, scope: Scope) -> str | None:
        """The protected resource metadata URL as this request reaches the gateway."""
        return request_origin(scope) + self.prm_path if self.prm_path else None

    async def unauthorized(self, scope: Scope, send: Send, why: str, token_sent: bool) -> None:
        """401 asking for a token (`error=` only when one was sent, as RFC 6750 says)."""
        value = challenge(self.metadata_url(scope), self.scope_hint, why if token_sent else None)
        await send_error(send, 401, "invalid_token", why, [(b"www-authenticate", value)])
