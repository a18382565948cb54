"""The one error type Broker handlers raise; the Broker writes every one in one place."""

from __future__ import annotations

from ..asgi import Headers


class OAuthError(Exception):
    """An OAuth error answer (RFC 6749 §4.1.2.1, §5.2).

    With `redirect_href` (only ever a redirect URI that matched the client's registration) it
    goes back to the client as query parameters; otherwise it is answered in place: a page on
    the browser endpoints, JSON elsewhere."""

    def __init__(
        self,
        status: int,
        error: str,
        description: str,
        *,
        redirect_href: str | None = None,
        state: str | None = None,
        headers: Headers | None = None,
    ):
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description
        self.redirect_href = redirect_href
        self.state = state
        self.headers = headers


def method_not_allowed(allowed: str) -> OAuthError:
    """405 naming the methods the endpoint answers."""
    return OAuthError(
        405, "invalid_request", f"use {allowed}", headers=[(b"allow", allowed.encode())]
    )
