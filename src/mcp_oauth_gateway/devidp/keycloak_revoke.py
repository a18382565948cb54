"""Token revocation (RFC 7009) as Keycloak 26.7 answers it (probed on the real server):
revoking a refresh token ends its session (the session's refresh tokens then get `Session not
active`, its access tokens 401); revoking an access token refuses that token alone. Both answer
200 with an empty body; a token Keycloak cannot read answers 200 `invalid_token` "Invalid
token", a request without one 400 `invalid_request` "Token not provided"."""

from __future__ import annotations

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import Response

from .keycloak_realm import Realm
from .oidc import OAuthError, OpenIdProvider
from .oidc_http import json_response, oauth_error, read_form


class Revocation:
    """`POST …/protocol/openid-connect/revoke`."""

    def __init__(self, provider: OpenIdProvider, realm: Realm, key: RSAKey):
        self.provider = provider
        self.realm = realm
        self.key = key

    async def revoke(self, request: Request) -> Response:
        """Revoke a refresh or access token of the authenticated client."""
        form = await read_form(request)
        try:
            client = self.provider.client_from_request(request, form)
        except OAuthError as exc:
            return oauth_error(exc)
        token = form.get("token")
        if not token:
            return json_response(
                {"error": "invalid_request", "error_description": "Token not provided"}, 400
            )
        record = self.provider.refresh_tokens.get(token)
        if record is not None and record["client_id"] == client.client_id:
            self.realm.end_sessions(sid=record.get("sid"), subject=None)
            if record.get("sid") is None:
                record["ended"] = True
            return Response(status_code=200)
        try:
            claims = jwt.decode(token, self.key, algorithms=["RS256"]).claims
        except (JoseError, ValueError):
            claims = {}
        if claims.get("azp") != client.client_id or "jti" not in claims:
            return json_response({"error": "invalid_token", "error_description": "Invalid token"})
        self.realm.ended.add(claims["jti"])
        return Response(status_code=200)
