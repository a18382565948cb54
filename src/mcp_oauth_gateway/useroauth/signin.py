"""Who is at the browser: the connect pages sign the user in at the route's own provider (as
`jwtAuthentication.mcp.clientId`, PKCE) and read the identity from the access token the route
itself would accept, so the comparison with the caller who was asked is the gateway's own
verification, never a claim the browser makes. The provider's session makes it one click."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import pkce
from ..asgi import Scope, Send, request_origin
from ..html_pages import send_redirect
from ..usertokens.keys import TokenKeys
from .browser import PageError, new_flow_cookie, sealed_flow
from .metadata import AuthServer, MetadataProblem, read_server_metadata
from .oauth_client import authorization_url

SIGNED_IN = "/connect/signed-in"


class NotVerified(Exception):
    """The provider's token is not one the route accepts."""


Metadata = Callable[[], Awaitable[Mapping[str, Any]]]
Verify = Callable[[str], Awaitable[Mapping[str, object]]]


@dataclass(frozen=True)
class SignIn:
    """How the pages learn who is at the browser: the route's sign-in client, each provider's
    metadata by issuer (the first one for a page no caller asked for), and the route's own
    token verification."""

    client_id: str
    providers: Mapping[str, Metadata]
    first_issuer: str
    verify: Verify

    async def server(self, issuer: str) -> AuthServer:
        """The provider of `issuer` as an authorization server."""
        metadata = self.providers.get(issuer)
        if metadata is None:
            raise PageError(
                400,
                "Unknown identity provider",
                "The identity provider this link was made for is no longer configured for "
                "this MCP server; ask your MCP client for a new link.",
            )
        try:
            # The route's own provider: an http issuer is the operator's choice, as for its keys.
            return read_server_metadata(dict(await metadata()), issuer, allow_http=True)
        except MetadataProblem as exc:
            raise PageError(502, "Identity provider unusable", f"its metadata: {exc}") from None


def redirect_uri(scope: Scope, mcp_path: str, suffix: str) -> str:
    """A page of this route as the browser reaches it."""
    return request_origin(scope) + mcp_path + suffix


async def start(
    scope: Scope,
    send: Send,
    keys: TokenKeys,
    signin: SignIn,
    mcp_path: str,
    flow: dict[str, object],
    issuer: str,
) -> None:
    """Send the browser to sign in; `flow` says what to do once it is back."""
    server = await signin.server(issuer)
    verifier = pkce.new_verifier()
    state = secrets.token_urlsafe(24)
    kept = {**flow, "verifier": verifier, "issuer": issuer, "state": state}
    _, cookie = new_flow_cookie(scope, mcp_path, value=sealed_flow(keys, kept))
    url = authorization_url(
        server,
        signin.client_id,
        redirect_uri(scope, mcp_path, SIGNED_IN),
        state,
        pkce.s256(verifier),
        ("openid",),
        None,
    )
    await send_redirect(send, url, [(b"set-cookie", cookie)])
