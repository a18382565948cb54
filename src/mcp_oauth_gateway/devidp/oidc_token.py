"""The token endpoint of the shared OpenID provider: the client authenticated (Basic or form),
then the authorization code (PKCE), refresh token, client credentials and password grants, and
token exchange handed to the flavour; every refusal as the flavour words it (`TokenErrors`)."""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from .. import pkce
from .oidc_http import OAuthError, TokenErrors, form_pairs, oauth_error, read_form, token_response
from .oidc_types import Flavour, OAuthClient, Subject

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


class Issuer(Protocol):
    """What the token endpoint reads of the OpenID provider (`oidc.OpenIdProvider`)."""

    flavour: Flavour
    errors: TokenErrors
    codes: dict[str, dict[str, Any]]
    refresh_tokens: dict[str, dict[str, Any]]
    rotates_refresh_tokens: Callable[[], bool]
    refresh_scope_check: Callable[[OAuthClient, str], None] | None

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
        """Issue the tokens of a grant."""
        ...


class TokenEndpoint:
    """`POST …/token` over one provider's codes, refresh tokens and minting."""

    def __init__(self, provider: Issuer, now: Callable[[], float]):
        self.provider = provider
        self.now = now  # the wall clock that expires codes and refresh tokens

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
        client = self.provider.flavour.find_client(client_id or "")
        if client is None:
            raise OAuthError.of(self.provider.errors.unknown_client)
        if secret is not None and client.secret is not None:
            if not hmac.compare_digest(secret, client.secret):
                raise OAuthError.of(self.provider.errors.bad_secret)
        elif not client.public:
            raise OAuthError.of(self.provider.errors.no_secret)
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
                return token_response(
                    self.provider.flavour.token_exchange(base, client, form, audiences)
                )
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
        errors = self.provider.errors
        if not grant:
            raise OAuthError.of(errors.missing_grant)
        if grant not in ("authorization_code", "refresh_token", "client_credentials", "password"):
            raise OAuthError.of(errors.unsupported_grant, grant=grant)
        public = client.public and client.secret is None
        if grant == "client_credentials" and public and errors.public_client_credentials_first:
            raise OAuthError.of(errors.public_client_credentials)
        if grant not in client.grant_types:
            status, error = self.provider.flavour.grant_not_allowed_error
            default = (status, error, f"the {grant} grant is not allowed for client {{client}}")
            refusal = errors.grant_not_allowed.get(grant, default)
            raise OAuthError.of(refusal, client=client.client_id)

    def _code_grant(self, base: str, client: OAuthClient, form: dict[str, str]) -> dict[str, Any]:
        errors = self.provider.errors
        if not form.get("code"):
            raise OAuthError.of(errors.code_missing)
        record = self.provider.codes.pop(form["code"], None)
        if record is None or record["exp"] < self.now():
            raise OAuthError.of(errors.code_invalid)
        if record["client_id"] != client.client_id:
            raise OAuthError.of(errors.code_other_client)
        if record["redirect_uri"] != form.get("redirect_uri"):
            raise OAuthError.of(errors.redirect_mismatch)
        if record["challenge"] and not form.get("code_verifier"):
            raise OAuthError.of(errors.pkce_missing)
        if record["challenge"] and not pkce.verify(form["code_verifier"], record["challenge"]):
            raise OAuthError.of(errors.pkce_mismatch)
        subject = self.provider.flavour.subject_by_id(record["subject"])
        if subject is None:
            raise OAuthError.of(errors.code_invalid)
        return self.provider.mint(
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
            raise OAuthError.of(self.provider.errors.refresh_missing)
        errors, record = (
            self.provider.errors,
            self.provider.refresh_tokens.get(form["refresh_token"]),
        )
        if record is None or record["exp"] < self.now() or record["client_id"] != client.client_id:
            raise OAuthError.of(errors.refresh_invalid)
        if self.provider.refresh_scope_check is not None and "scope" in form:
            self.provider.refresh_scope_check(client, form["scope"])  # the token stays good
        subject = self.provider.flavour.subject_by_id(record["subject"])
        if subject is None or record.get("ended"):
            raise OAuthError.of(
                errors.offline_ended if record.get("offline") else errors.session_ended
            )
        if record.get("client_ended"):
            raise OAuthError.of(errors.client_session_ended)
        if self.provider.rotates_refresh_tokens():
            if record.get("used") and errors.reuse_ends_session:
                for other in self.provider.refresh_tokens.values():
                    if other.get("sid") == record["sid"] and other["client_id"] == client.client_id:
                        other["client_ended"] = True
            if record.get("used"):
                raise OAuthError.of(errors.refresh_reused)
            record["used"] = True
        same = {"sid": record["sid"]} if record.get("sid") else None  # the same session
        scopes, resource = record["scopes"], record["resource"]
        return self.provider.mint(base, client, subject, scopes, resource, overrides=same)

    def _client_credentials_grant(
        self, base: str, client: OAuthClient, form: dict[str, str]
    ) -> dict[str, Any]:
        if client.public and client.secret is None:
            raise OAuthError.of(self.provider.errors.public_client_credentials)
        scopes = self.provider.flavour.scope_tokens(form.get("scope", ""))
        return self.provider.mint(
            base,
            client,
            self.provider.flavour.service_subject(client),
            scopes,
            form.get("resource"),
            refresh=False,
        )

    def _password_grant(
        self, base: str, client: OAuthClient, form: dict[str, str]
    ) -> dict[str, Any]:
        if client.consent and self.provider.errors.consent_required is not None:
            raise OAuthError.of(self.provider.errors.consent_required)
        subject = self.provider.flavour.authenticate(
            form.get("username", ""), form.get("password", "")
        )
        if subject is None:
            raise OAuthError.of(self.provider.errors.user_credentials)
        scopes = self.provider.flavour.scope_tokens(form.get("scope", "email profile"))
        return self.provider.mint(base, client, subject, scopes, None)
