"""Keycloak's standard token exchange (V2, Keycloak ≥ 26.2) as the dev IdP speaks it, with the
checks in Keycloak's order and its refusals word for word (docs/token-exchange.md §1).

Held to: the requesting client is confidential with `standard.token.exchange.enabled`; the
subject token is an access token of this realm, unexpired, of a live session (Keycloak 26.7.3
refuses a signed-out user's token: "Invalid token"); the requester is the token's `azp` or in its
`aud`; `audience` only narrows the audiences the requester's scopes produce; the exchanged token
keeps the subject token's `sid`, as Keycloak 26.7.3 does."""

from __future__ import annotations

import time
from typing import Any, Protocol

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import RSAKey

from ..oauth_scopes import scope_tokens
from .oidc import OAuthClient, OAuthError, OpenIdProvider, Subject


class KeycloakFlavour(Protocol):
    """What the exchange reads of the realm (the flavour in `keycloak`)."""

    provider: OpenIdProvider

    def issuer(self, base: str, client: OAuthClient) -> str:
        """The realm's issuer."""
        ...

    def signing_key_of_realm(self) -> RSAKey:
        """The realm's signing key."""
        ...

    def client_attribute(self, client_id: str, name: str) -> str | None:
        """A client's attribute."""
        ...

    def find_client(self, client_id: str) -> OAuthClient | None:
        """A client of the realm."""
        ...

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """A user of the realm."""
        ...

    def token_claims(
        self, client: OAuthClient, subject: Subject, scopes: list[str], resource: str | None
    ) -> dict[str, Any]:
        """The claims the client's scopes give a token."""
        ...

    def session_ended(self, claims: dict[str, Any]) -> bool:
        """Whether the token's session was ended (a user's logout, logout-all)."""
        ...


ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
ENABLED = "standard.token.exchange.enabled"
UNSUPPORTED = ("requested_subject", "requested_issuer", "subject_issuer")


def _invalid(description: str) -> OAuthError:
    return OAuthError(400, "invalid_request", description)


def _parameters(form: dict[str, str]) -> None:
    for name in UNSUPPORTED:
        if name in form:
            raise _invalid(f"Parameter '{name}' is not supported for standard token exchange")
    for name in ("subject_token", "subject_token_type"):
        if not form.get(name):
            raise _invalid(f"Parameter '{name}' required for standard token exchange")
    if form["subject_token_type"] != ACCESS_TOKEN:
        raise _invalid("Parameter 'subject_token' supports access tokens only")


def _subject_claims(flavour: KeycloakFlavour, base: str, token: str) -> dict[str, Any]:
    """The subject token's claims, if it is a live access token of this realm."""
    try:
        claims = jwt.decode(token, flavour.signing_key_of_realm(), algorithms=["RS256"]).claims
    except (JoseError, ValueError):
        raise _invalid("Invalid token") from None
    realm = flavour.issuer(base, None)  # type: ignore[arg-type]
    if claims.get("iss") != realm or claims.get("typ") != "Bearer":
        raise _invalid("Invalid token")
    if not isinstance(claims.get("exp"), int) or claims["exp"] < time.time():
        raise _invalid("Invalid token")
    if flavour.session_ended(claims):
        raise _invalid("Invalid token")
    return claims


def _audiences(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [a for a in value if isinstance(a, str)] if isinstance(value, list) else []


def exchange(
    flavour: KeycloakFlavour,
    base: str,
    client: OAuthClient,
    form: dict[str, str],
    audiences: list[str],
) -> dict[str, Any]:
    """The exchanged token response, or OAuthError as Keycloak would answer."""
    if flavour.client_attribute(client.client_id, ENABLED) != "true":
        raise _invalid("Standard token exchange is not enabled for the requested client")
    _parameters(form)
    subject_claims = _subject_claims(flavour, base, form["subject_token"])
    requested_type = form.get("requested_token_type", ACCESS_TOKEN)
    if requested_type != ACCESS_TOKEN:
        raise _invalid("requested_token_type unsupported")
    if any(flavour.find_client(a) is None for a in audiences):
        raise OAuthError(400, "invalid_client", "Audience not found")
    if client.public:
        raise OAuthError(400, "invalid_client", "Public client is not allowed to exchange token")
    if subject_claims.get("azp") != client.client_id and client.client_id not in _audiences(
        subject_claims.get("aud")
    ):
        raise OAuthError(403, "access_denied", "Client is not within the token audience")
    subject = flavour.subject_by_id(str(subject_claims.get("sub")))
    if subject is None:
        raise _invalid("Invalid token")
    scopes = scope_tokens(form.get("scope", ""))
    available = _audiences(flavour.token_claims(client, subject, scopes, None).get("aud"))
    missing = [a for a in audiences if a not in available]
    if missing:
        raise _invalid(f"Requested audience not available: {', '.join(missing)}")
    narrowed = audiences or available
    overrides: dict[str, Any] = {}
    if "sid" in subject_claims:
        overrides["sid"] = subject_claims["sid"]
    if narrowed:
        overrides["aud"] = narrowed[0] if len(narrowed) == 1 else narrowed
    answer = flavour.provider.mint(
        base, client, subject, scopes, None, refresh=False, overrides=overrides
    )
    answer.pop("id_token", None)
    return {**answer, "issued_token_type": ACCESS_TOKEN, "refresh_expires_in": 0}
