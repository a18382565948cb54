"""The authorization endpoint's refusals as Keycloak 26.7 words them (probed on the real server),
in front of the shared one: an unknown client and a missing or unregistered `redirect_uri` get an
error page (400, never a redirect); a `scope` naming anything but `openid` and the client's own
client scopes is sent back to the client as `invalid_scope` ("Invalid scopes: <scope>"), and a
refresh request's `scope` is held to the same rule."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..oauth_scopes import scope_tokens
from . import pages
from .oidc import OAuthClient, OAuthError
from .oidc_http import append_query, redirect_allowed

Handler = Callable[[Request], Awaitable[Response]]


def _sorry(message: str) -> Response:
    return pages.error_page("We are sorry...", message, 400)


class KeycloakAuthorize:
    """Wraps the shared authorization endpoint."""

    def __init__(
        self,
        handler: Handler,
        find_client: Callable[[str], OAuthClient | None],
        client_scopes: Callable[[str], set[str]],
        issuer: str,
    ):
        self.handler = handler
        self.find_client = find_client
        self.client_scopes = client_scopes  # client id → names of its default and optional scopes
        self.issuer = issuer  # the realm's path, joined to the request's base

    async def authorize(self, request: Request) -> Response:
        """Refuse as Keycloak refuses, else hand the request on."""
        params = request.query_params
        client = self.find_client(params.get("client_id", ""))
        if client is None:
            return _sorry("Client not found.")
        redirect_uri = params.get("redirect_uri", "")
        if not redirect_allowed(client, redirect_uri):
            return _sorry("Invalid parameter: redirect_uri")
        scope = params.get("scope")
        coded = params.get("response_type") == "code"
        if coded and scope is not None and not self._valid_scope(client, scope):
            query = {"error": "invalid_scope", "error_description": f"Invalid scopes: {scope}"}
            if "state" in params:
                query["state"] = params["state"]
            query["iss"] = str(request.base_url).rstrip("/") + self.issuer
            return RedirectResponse(append_query(redirect_uri, query), status_code=302)
        return await self.handler(request)

    def _valid_scope(self, client: OAuthClient, scope: str) -> bool:
        requested, known = scope_tokens(scope), self.client_scopes(client.client_id)
        return bool(requested) and set(requested) <= {"openid", *known}

    def check_refresh_scope(self, client: OAuthClient, scope: str) -> None:
        """A refresh's `scope` is held to the same rule (the refresh token stays good)."""
        if not self._valid_scope(client, scope):
            raise OAuthError(400, "invalid_scope", f"Invalid scopes: {scope}")
