"""The userinfo endpoint as Keycloak 26.7 answers it (probed on the real server): no bearer
token is 401 with a bare `WWW-Authenticate: Bearer realm="master"`; a token that fails
verification 401 `invalid_token` "Token verification failed"; a token without the `openid` scope
403 `insufficient_scope` "Missing openid scope" (all with empty bodies); an `Origin` outside the
client's web origins 403 `{"error":"Invalid origin"}`, an allowed one echoed with credentials."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..oauth_scopes import scope_tokens
from .keycloak_cors import echo, origin_allowed
from .oidc_http import json_response
from .store import Record

CLAIMS = (
    *("sub", "email_verified", "name", "preferred_username", "given_name", "family_name"),
    *("email", "groups"),
)


def _challenge(
    status: int, realm: str, error: str | None = None, description: str = ""
) -> Response:
    value = f'Bearer realm="{realm}"'
    if error is not None:
        value += f', error="{error}", error_description="{description}"'
    return Response(
        status_code=status,
        headers={"WWW-Authenticate": value, "Cache-Control": "no-store"},
        media_type="text/plain",
    )


class Userinfo:
    """`GET`/`POST …/protocol/openid-connect/userinfo`."""

    def __init__(
        self,
        realm: str,
        claims_of: Callable[[Request], dict[str, Any] | None],
        client_record: Callable[[str], Record | None],
    ):
        self.realm = realm
        self.claims_of = claims_of  # a valid, unrefused token's claims
        self.client_record = client_record

    async def userinfo(self, request: Request) -> Response:
        """The user's claims, as the token's scopes give them."""
        if not request.headers.get("authorization", "").lower().startswith("bearer "):
            return _challenge(401, self.realm)
        claims = self.claims_of(request)
        if claims is None:
            return _challenge(401, self.realm, "invalid_token", "Token verification failed")
        if "openid" not in scope_tokens(str(claims.get("scope", ""))):
            return _challenge(403, self.realm, "insufficient_scope", "Missing openid scope")
        origin = request.headers.get("origin")
        if origin is not None and not origin_allowed(
            self.client_record(str(claims["azp"])), origin
        ):
            return json_response({"error": "Invalid origin"}, 403, {"Cache-Control": "no-store"})
        answer = json_response(
            {k: claims[k] for k in CLAIMS if k in claims},
            headers={"Cache-Control": "no-store, no-cache"},
        )
        return echo(answer, origin, expose=True)
