"""The OpenID provider half of the dev identity provider, shared by both flavours.

Authorization code with PKCE (S256 only), a login form and a consent page, RFC 9207 `iss` in
authorization responses, refresh tokens, client credentials, discovery and JWKS. Tokens are RS256
JWTs signed with joserfc; what goes into them is decided by the flavour (`Flavour`, in
`oidc_types`), from what the provisioning tools configured. The token endpoint's grants are in
`oidc_token`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from joserfc import jwt
from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from . import pages
from .oidc_http import OAuthError as OAuthError
from .oidc_http import TokenErrors, append_query, redirect_allowed
from .oidc_http import json_response as json_response
from .oidc_http import oauth_error as oauth_error
from .oidc_http import read_form as read_form
from .oidc_http import standard_id_claims as standard_id_claims
from .oidc_http import token_response as token_response
from .oidc_token import TOKEN_EXCHANGE as TOKEN_EXCHANGE
from .oidc_token import TokenEndpoint
from .oidc_types import Flavour as Flavour
from .oidc_types import OAuthClient as OAuthClient
from .oidc_types import Subject as Subject

CODE_TTL = 60
INTERACTION_TTL = 600
SESSION_COOKIE = "devidp_session"


class OpenIdProvider:
    """Authorization, token, userinfo endpoints and the interaction pages for one flavour."""

    def __init__(
        self,
        flavour: Flavour,
        errors: TokenErrors | None = None,
        extras: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
    ):
        self.flavour = flavour
        self.errors = errors or TokenErrors()
        # Adds a provider's own members to a token response, from the access token's claims.
        self.extras = extras
        self.interactions: dict[str, dict[str, Any]] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.refresh_tokens: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, str] = {}  # session cookie → subject id
        # (subject, client) → the scopes the user consented to (asked again for more).
        self.consents: dict[tuple[str, str], set[str]] = {}
        # Keycloak: no access_denied description; a sign-in's session id as session_state/sid.
        self.denied_description: str | None = "the user denied access"
        self.session_state = False
        # Refresh tokens good once? (authentik; Keycloak's revokeRefreshToken); refresh scopes.
        self.rotates_refresh_tokens: Callable[[], bool] = lambda: True
        self.refresh_scope_check: Callable[[OAuthClient, str], None] | None = None
        self.access_tokens: dict[str, dict[str, Any]] = {}
        # Reads this module's `time` when called (tests move the dev IdP's wall clock there).
        self._token_endpoint = TokenEndpoint(self, lambda: time.time())

    # --- tokens ---------------------------------------------------------------------------

    def mint(
        self,
        base: str,
        client: OAuthClient,
        subject: Subject,
        scopes: list[str],
        resource: str | None,
        nonce: str | None = None,
        refresh: bool = True,
        overrides: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Issue access (and id, refresh) tokens for `subject` (`overrides`: claims the grant
        decides itself, as token exchange does `aud`)."""
        flavour = self.flavour
        now = int(time.time())
        ttl = flavour.access_token_ttl(client)
        issuer = flavour.issuer(base, client)
        key = flavour.signing_key(client)
        claims = {
            "iss": issuer,
            "iat": now,
            "exp": now + ttl,
            "jti": secrets.token_urlsafe(16),
            **flavour.token_claims(client, subject, scopes, resource),
            **(overrides or {}),
        }
        header = {"alg": "RS256", "kid": key.kid, "typ": "JWT"}
        access = jwt.encode(header, claims, key)
        self.access_tokens[claims["jti"]] = {"subject": subject.id, "sid": claims.get("sid")}
        out: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": ttl,
            "scope": " ".join(scopes),
        }
        if "openid" in scopes and not subject.service_account:
            # Each provider shapes its ID token differently, and the gateway tells them from
            # access tokens by exactly that difference, so the flavour decides.
            id_claims = flavour.id_token_claims(
                client, claims, standard_id_claims(client.client_id, claims, now)
            )
            if nonce:
                id_claims["nonce"] = nonce
            out["id_token"] = jwt.encode(header, id_claims, key)
        if refresh and "refresh_token" in client.grant_types and not subject.service_account:
            token = secrets.token_urlsafe(32)
            self.refresh_tokens[token] = {
                "client_id": client.client_id,
                "subject": subject.id,
                "scopes": scopes,
                "resource": resource,
                "exp": now + 1800,
                "sid": claims.get("sid"),
            }
            out["refresh_token"] = token
            out["refresh_expires_in"] = 1800
        if self.extras is not None:
            self.extras(out, claims)
        return out

    # --- authorization --------------------------------------------------------------------

    async def authorize(self, request: Request) -> Response:
        """Validate the authorization request and send the browser to the login page."""
        params = dict(request.query_params)
        client = self.flavour.find_client(params.get("client_id", ""))
        if client is None:
            return pages.error_page(
                "Unknown client",
                f"client_id {params.get('client_id')!r} is not registered with this provider.",
                400,
            )
        redirect_uri = params.get("redirect_uri", "")
        if not redirect_allowed(client, redirect_uri):
            return pages.error_page(
                "Invalid redirect URI",
                f"{redirect_uri!r} is not a registered redirect URI of client {client.client_id}.",
                400,
            )
        base = str(request.base_url).rstrip("/")
        issuer = self.flavour.issuer(base, client)

        def fail(error: str, description: str) -> Response:
            query = {"error": error, "error_description": description, "iss": issuer}
            if "state" in params:
                query["state"] = params["state"]
            return RedirectResponse(append_query(redirect_uri, query), status_code=302)

        if params.get("response_type") != "code":
            return fail("unsupported_response_type", "only response_type=code is supported")
        if "authorization_code" not in client.grant_types:
            return fail(
                "unauthorized_client", "the client may not use the authorization code grant"
            )
        challenge = params.get("code_challenge")
        method = params.get("code_challenge_method", "plain")
        if client.public and not challenge:
            return fail("invalid_request", "PKCE code_challenge is required for public clients")
        if challenge and method != "S256":
            return fail("invalid_request", "code_challenge_method must be S256")
        uid = secrets.token_urlsafe(16)
        self.interactions[uid] = {
            "params": params,
            "client_id": client.client_id,
            "base": base,
            "exp": time.time() + INTERACTION_TTL,
        }
        return RedirectResponse(f"{base}{self.flavour.interaction_prefix}/{uid}", status_code=303)

    def _interaction(self, uid: str) -> dict[str, Any] | None:
        item = self.interactions.get(uid)
        if item is None or item["exp"] < time.time():
            self.interactions.pop(uid, None)
            return None
        return item

    async def interaction(self, request: Request) -> Response:
        """The login form, then the consent page, then the redirect back to the client."""
        uid = request.path_params["uid"]
        item = self._interaction(uid)
        if item is None:
            return pages.error_page(
                "Sign-in expired", "Start the sign-in again from your application.", 400
            )
        client = self.flavour.find_client(item["client_id"])
        assert client is not None
        action = f"{self.flavour.interaction_prefix}/{uid}"
        if request.method == "POST":
            form = await read_form(request)
            if form.get("prompt") == "login":
                subject = self.flavour.authenticate(form.get("login", ""), form.get("password", ""))
                if subject is None:
                    return pages.login_page(
                        action,
                        client.name or client.client_id,
                        "Invalid username or password.",
                        401,
                    )
                item["subject"] = subject.id
            elif form.get("prompt") == "consent" and "subject" in item:
                if form.get("decision", "allow") != "allow":
                    return self._finish_error(item, "access_denied", self.denied_description)
                key = (item["subject"], client.client_id)
                self.consents.setdefault(key, set()).update(
                    self.flavour.scope_tokens(item["params"].get("scope", ""))
                )
            return RedirectResponse(str(request.url), status_code=303)
        if "subject" not in item:
            return pages.login_page(action, client.name or client.client_id)
        scopes = self.flavour.scope_tokens(item["params"].get("scope", ""))
        consented = self.consents.get((item["subject"], client.client_id))
        if client.consent and (consented is None or not set(scopes) <= consented):
            return pages.consent_page(
                action,
                client.name or client.client_id,
                scopes,
                urlsplit(item["params"]["redirect_uri"]).netloc,
            )
        return self._finish(uid, item, client)

    def _finish_error(self, item: dict[str, Any], error: str, description: str | None) -> Response:
        params = item["params"]
        client = self.flavour.find_client(item["client_id"])
        assert client is not None
        query = {"error": error, "iss": self.flavour.issuer(item["base"], client)}
        if description is not None:
            query["error_description"] = description
        if "state" in params:
            query["state"] = params["state"]
        return RedirectResponse(append_query(params["redirect_uri"], query), status_code=303)

    def _finish(self, uid: str, item: dict[str, Any], client: OAuthClient) -> Response:
        params = item["params"]
        self.interactions.pop(uid, None)
        code = secrets.token_urlsafe(32)
        self.codes[code] = {
            "client_id": client.client_id,
            "redirect_uri": params["redirect_uri"],
            "subject": item["subject"],
            "scopes": self.flavour.scope_tokens(params.get("scope", "")),
            "challenge": params.get("code_challenge"),
            "resource": params.get("resource"),
            "nonce": params.get("nonce"),
            "exp": time.time() + CODE_TTL,
            "base": item["base"],
        }
        query = {"code": code, "iss": self.flavour.issuer(item["base"], client)}
        if "state" in params:
            query["state"] = params["state"]
        if self.session_state:
            self.codes[code]["sid"] = query["session_state"] = secrets.token_urlsafe(18)
        return RedirectResponse(append_query(params["redirect_uri"], query), status_code=303)

    # --- token endpoint -------------------------------------------------------------------

    def client_from_request(self, request: Request, form: dict[str, str]) -> OAuthClient:
        """The client a token request authenticates as (OAuthError when it does not)."""
        return self._token_endpoint.client_from_request(request, form)

    async def token(self, request: Request) -> Response:
        """The token endpoint: authorization_code, refresh_token, client_credentials, password."""
        return await self._token_endpoint.token(request)

    # --- userinfo -------------------------------------------------------------------------

    def bearer_claims(self, request: Request, key: RSAKey) -> dict[str, Any] | None:
        """The claims of a valid access token in the Authorization header."""
        auth = request.headers.get("authorization", "")
        if not auth.lower().startswith("bearer "):
            return None
        try:
            token = jwt.decode(auth[7:].strip(), key, algorithms=["RS256"])
        except Exception:  # any decoding failure means "not a valid token"
            return None
        # Expired once the clock's whole second is past `exp` (Keycloak's `Time.currentTime()`).
        if token.claims.get("exp", 0) < int(time.time()):
            return None
        return token.claims
