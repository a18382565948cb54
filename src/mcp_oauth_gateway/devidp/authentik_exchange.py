"""authentik's token exchange (2026.8) as the dev IdP speaks it (docs/token-exchange.md §2).

Held to: the requesting provider lists the grant in `grant_types`; the subject token comes from
a provider in its `jwt_federation_providers` (its own only when exchanging for another one);
`audience` (one, a provider's client id) names a target that trusts the requester in turn, and
the token is then the target's (its issuer, key, `aud` = `azp` = its client id); no `resource`;
every refusal is HTTP 400 with authentik's fixed description for the code."""

from __future__ import annotations

import time
from typing import Any, Protocol

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import RSAKey

from ..oauth_scopes import whitespace_tokens
from .oidc import OAuthClient, OAuthError, OpenIdProvider, Subject

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
TYPES = ("urn:ietf:params:oauth:token-type:access_token", "urn:ietf:params:oauth:token-type:jwt")
DESCRIPTIONS = {
    "invalid_request": "The request is otherwise malformed",
    "invalid_grant": (
        "The provided authorization grant or refresh token is invalid, expired, revoked, does "
        "not match the redirection URI used in the authorization request, or was issued to "
        "another client"
    ),
    "invalid_target": (
        "The authorization server is unable to issue a token for the target service indicated "
        "by the 'resource' or 'audience' parameter"
    ),
}


class AuthentikFlavour(Protocol):
    """What the exchange reads of the instance (the flavour in `authentik`)."""

    provider: OpenIdProvider

    def find_client(self, client_id: str) -> OAuthClient | None:
        """A provider bound to an application, as a client."""
        ...

    def provider_record(self, client: OAuthClient) -> dict[str, Any]:
        """The stored provider behind a client."""
        ...

    def clients_trusted_by(self, client: OAuthClient) -> list[OAuthClient]:
        """The providers in a provider's `jwt_federation_providers` (bound to applications)."""
        ...

    def issuer(self, base: str, client: OAuthClient) -> str:
        """A provider's issuer."""
        ...

    def signing_key(self, client: OAuthClient) -> RSAKey:
        """A provider's signing key."""
        ...

    def subject_by_token_sub(self, client: OAuthClient, sub: str) -> Subject | None:
        """The user a provider's token names (by that provider's sub mode)."""
        ...


def refused(error: str) -> OAuthError:
    """authentik's refusal: always 400, the fixed description of the code."""
    return OAuthError(400, error, DESCRIPTIONS[error])


def _subject(
    flavour: AuthentikFlavour, base: str, token: str, issuers: list[OAuthClient]
) -> tuple[OAuthClient, dict[str, Any]]:
    """The provider that issued the subject token, among the trusted, and its claims."""
    for issuer in issuers:
        try:
            claims = jwt.decode(token, flavour.signing_key(issuer), algorithms=["RS256"]).claims
        except (JoseError, ValueError, RuntimeError):
            continue
        live = claims.get("exp", 0) > time.time()
        if claims.get("iss") == flavour.issuer(base, issuer) and live:
            return issuer, claims
    raise refused("invalid_grant")


def _target(flavour: AuthentikFlavour, client: OAuthClient, audiences: list[str]) -> OAuthClient:
    if len(audiences) != 1:
        raise refused("invalid_target")
    target = flavour.find_client(audiences[0])
    if target is None or client.client_id not in {
        c.client_id for c in flavour.clients_trusted_by(target)
    }:
        raise refused("invalid_target")
    return target


def exchange(
    flavour: AuthentikFlavour,
    base: str,
    client: OAuthClient,
    form: dict[str, str],
    audiences: list[str],
) -> dict[str, Any]:
    """The exchanged token response, or OAuthError as authentik would answer."""
    if GRANT not in client.grant_types:
        raise refused("invalid_grant")
    if not form.get("subject_token") or form.get("subject_token_type") not in TYPES:
        raise refused("invalid_request")
    requested = form.get("requested_token_type", TYPES[0])
    if requested not in TYPES:
        raise refused("invalid_request")
    if "resource" in form:
        raise refused("invalid_target")
    target = _target(flavour, client, audiences) if audiences else None
    trusted = flavour.clients_trusted_by(client)
    if target is not None:
        trusted = [*trusted, client]  # its own tokens, when exchanged for another provider
    issuer, claims = _subject(flavour, base, form["subject_token"], trusted)
    subject = flavour.subject_by_token_sub(issuer, str(claims.get("sub")))
    if subject is None:
        raise refused("invalid_grant")
    issuing = target or client
    # No scope asked: none granted (the provider's mappings clamp what is asked, silently).
    answer = flavour.provider.mint(
        base, issuing, subject, whitespace_tokens(form.get("scope", "")), None, refresh=False
    )
    issued = jwt.decode(answer["access_token"], flavour.signing_key(issuing)).claims
    return {
        "access_token": answer["access_token"],
        "issued_token_type": requested,
        "token_type": "Bearer",
        "scope": issued.get("scope", ""),
        "expires_in": answer["expires_in"],
    }
