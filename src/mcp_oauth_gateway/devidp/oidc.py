"""The OpenID provider half of the dev identity provider, shared by both flavours.

Authorization code with PKCE (S256 only), a login form and a consent page, RFC 9207 `iss` in
authorization responses, refresh tokens, client credentials, discovery and JWKS. Tokens are RS256
JWTs signed with joserfc; what goes into them is decided by the flavour (`Flavour`), from what the
provisioning tools configured.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from joserfc import jwt
from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .. import pkce
from . import pages
from .oidc_http import OAuthError as OAuthError
from .oidc_http import TokenErrors, append_query, form_pairs, redirect_allowed
from .oidc_http import json_response as json_response
from .oidc_http import oauth_error as oauth_error
from .oidc_http import read_form as read_form
from .oidc_http import standard_id_claims as standard_id_claims
from .oidc_http import token_response as token_response

CODE_TTL = 60
INTERACTION_TTL = 600
SESSION_COOKIE = "devidp_session"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


@dataclass(frozen=True)
class OAuthClient:
    client_id: str
    public: bool
    secret: str | None
    redirect_uris: tuple[tuple[str, str], ...]  # (matching mode, value)
    grant_types: frozenset[str]
    consent: bool
    name: str = ""
    context: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Subject:
    id: str
    username: str
    email: str | None = None
    name: str | None = None
    groups: tuple[str, ...] = ()
    service_account: bool = False


class Flavour(Protocol):
    name: str
    interaction_prefix: str
    grant_not_allowed_error: tuple[int, str]

    def token_exchange(
        self, base: str, client: OAuthClient, form: dict[str, str], audiences: list[str]
    ) -> dict[str, Any]:
        """RFC 8693, as this provider does it (its own rules and refusals)."""
        ...

    def issuer(self, base: str, client: OAuthClient) -> str:
        """The issuer for tokens of `client`."""
        ...

    def find_client(self, client_id: str) -> OAuthClient | None:
        """A registered client."""
        ...

    def authenticate(self, username: str, password: str) -> Subject | None:
        """A user whose credentials match."""
        ...

    def service_subject(self, client: OAuthClient) -> Subject:
        """The service account a client-credentials token stands for."""
        ...

    def token_claims(
        self, client: OAuthClient, subject: Subject, scopes: list[str], resource: str | None
    ) -> dict[str, Any]:
        """Claims of the access token (beyond iss, iat, exp, jti)."""
        ...

    def id_token_claims(
        self, client: OAuthClient, access: dict[str, Any], standard: dict[str, Any]
    ) -> dict[str, Any]:
        """Claims of the ID token, from the access token's and the standard OpenID ones."""
        ...

    def signing_key(self, client: OAuthClient) -> RSAKey:
        """The key that signs `client`'s tokens."""
        ...

    def access_token_ttl(self, client: OAuthClient) -> int:
        """Access-token lifetime in seconds."""
        ...

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """Reload a subject (for refresh tokens)."""
        ...

    def scope_tokens(self, text: str) -> list[str]:
        """The scopes of a `scope` parameter, split as this provider splits it."""
        ...


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
        client_id, secret = form.get("client_id"), form.get("client_secret")
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(auth[6:]).decode()
                basic_id, _, basic_secret = decoded.partition(":")
            except (ValueError, UnicodeDecodeError) as exc:
                raise OAuthError(401, "invalid_client", "malformed Basic credentials") from exc
            client_id, secret = unquote(basic_id), unquote(basic_secret)
        client = self.flavour.find_client(client_id or "")
        if client is None:
            raise OAuthError.of(self.errors.unknown_client)
        if secret is not None and client.secret is not None:
            if not hmac.compare_digest(secret, client.secret):
                raise OAuthError.of(self.errors.bad_secret)
        elif not client.public:
            raise OAuthError.of(self.errors.no_secret)
        return client

    async def token(self, request: Request) -> Response:
        """The token endpoint: authorization_code, refresh_token, client_credentials, password."""
        form = await read_form(request)
        try:
            client = self.client_from_request(request, form)
            grant = form.get("grant_type", "")
            base = str(request.base_url).rstrip("/")
            if grant == TOKEN_EXCHANGE:
                # Each provider decides for itself who may exchange (not by grant_types).
                audiences = [v for k, v in form_pairs(await request.body()) if k == "audience"]
                return token_response(self.flavour.token_exchange(base, client, form, audiences))
            self._check_grant(client, grant)
            handler = {
                "authorization_code": self._code_grant,
                "refresh_token": self._refresh_grant,
                "client_credentials": self._client_credentials_grant,
                "password": self._password_grant,
            }[grant]
            return token_response(handler(base, client, form))
        except OAuthError as exc:
            return oauth_error(exc)

    def _check_grant(self, client: OAuthClient, grant: str) -> None:
        errors = self.errors
        if not grant:
            raise OAuthError.of(errors.missing_grant)
        if grant not in ("authorization_code", "refresh_token", "client_credentials", "password"):
            raise OAuthError.of(errors.unsupported_grant, grant=grant)
        public = client.public and client.secret is None
        if grant == "client_credentials" and public and errors.public_client_credentials_first:
            raise OAuthError.of(errors.public_client_credentials)
        if grant not in client.grant_types:
            status, error = self.flavour.grant_not_allowed_error
            default = (status, error, f"the {grant} grant is not allowed for client {{client}}")
            refusal = errors.grant_not_allowed.get(grant, default)
            raise OAuthError.of(refusal, client=client.client_id)

    def _code_grant(self, base: str, client: OAuthClient, form: dict[str, str]) -> dict[str, Any]:
        errors = self.errors
        if not form.get("code"):
            raise OAuthError.of(errors.code_missing)
        record = self.codes.pop(form["code"], None)
        if record is None or record["exp"] < time.time():
            raise OAuthError.of(errors.code_invalid)
        if record["client_id"] != client.client_id:
            raise OAuthError.of(errors.code_other_client)
        if record["redirect_uri"] != form.get("redirect_uri"):
            raise OAuthError.of(errors.redirect_mismatch)
        if record["challenge"] and not form.get("code_verifier"):
            raise OAuthError.of(errors.pkce_missing)
        if record["challenge"] and not pkce.verify(form["code_verifier"], record["challenge"]):
            raise OAuthError.of(errors.pkce_mismatch)
        subject = self.flavour.subject_by_id(record["subject"])
        if subject is None:
            raise OAuthError.of(errors.code_invalid)
        return self.mint(
            record["base"],
            client,
            subject,
            record["scopes"],
            form.get("resource") or record["resource"],
            record["nonce"],
            overrides={"sid": record["sid"]} if "sid" in record else None,
        )

    def _refresh_grant(
        self, base: str, client: OAuthClient, form: dict[str, str]
    ) -> dict[str, Any]:
        if not form.get("refresh_token"):
            raise OAuthError.of(self.errors.refresh_missing)
        errors, record = self.errors, self.refresh_tokens.get(form["refresh_token"])
        if record is None or record["exp"] < time.time() or record["client_id"] != client.client_id:
            raise OAuthError.of(errors.refresh_invalid)
        if self.refresh_scope_check is not None and "scope" in form:
            self.refresh_scope_check(client, form["scope"])  # the token stays good
        subject = self.flavour.subject_by_id(record["subject"])
        if subject is None or record.get("ended"):
            raise OAuthError.of(
                errors.offline_ended if record.get("offline") else errors.session_ended
            )
        if record.get("client_ended"):
            raise OAuthError.of(errors.client_session_ended)
        if self.rotates_refresh_tokens():
            if record.get("used") and errors.reuse_ends_session:
                for other in self.refresh_tokens.values():
                    if other.get("sid") == record["sid"] and other["client_id"] == client.client_id:
                        other["client_ended"] = True
            if record.get("used"):
                raise OAuthError.of(errors.refresh_reused)
            record["used"] = True
        same = {"sid": record["sid"]} if record.get("sid") else None  # the same session
        scopes, resource = record["scopes"], record["resource"]
        return self.mint(base, client, subject, scopes, resource, overrides=same)

    def _client_credentials_grant(
        self, base: str, client: OAuthClient, form: dict[str, str]
    ) -> dict[str, Any]:
        if client.public and client.secret is None:
            raise OAuthError.of(self.errors.public_client_credentials)
        scopes = self.flavour.scope_tokens(form.get("scope", ""))
        return self.mint(
            base,
            client,
            self.flavour.service_subject(client),
            scopes,
            form.get("resource"),
            refresh=False,
        )

    def _password_grant(
        self, base: str, client: OAuthClient, form: dict[str, str]
    ) -> dict[str, Any]:
        if client.consent and self.errors.consent_required is not None:
            raise OAuthError.of(self.errors.consent_required)
        subject = self.flavour.authenticate(form.get("username", ""), form.get("password", ""))
        if subject is None:
            raise OAuthError.of(self.errors.user_credentials)
        scopes = self.flavour.scope_tokens(form.get("scope", "email profile"))
        return self.mint(base, client, subject, scopes, None)

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
