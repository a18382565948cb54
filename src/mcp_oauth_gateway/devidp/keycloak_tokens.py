"""What a Keycloak access token carries, from the client scopes a request applies (Keycloak 26.7,
probed on the real server): `basic` gives `sub` and `auth_time`, `acr` gives `acr`, `web-origins`
the client's `allowed-origins`, `profile` and `email` the user's names and address, and the
realm's own scopes their audience and group mappers. The `scope` claim names `openid` (when
asked for) and the applied scopes whose `include.in.token.scope` is not `false`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from joserfc import jwt
from joserfc.jwk import OctKey

from ..oauth_scopes import scope_tokens
from .keycloak_cors import web_origins
from .oidc import OAuthClient, Subject
from .oidc_http import TokenErrors
from .store import Record, new_id

# The token endpoint's refusals, word for word.
KEYCLOAK_ERRORS = TokenErrors(
    bad_secret=(401, "unauthorized_client", "Invalid client or Invalid client credentials"),
    no_secret=(401, "unauthorized_client", "Invalid client or Invalid client credentials"),
    missing_grant=(400, "invalid_request", "Missing form parameter: grant_type"),
    unsupported_grant=(400, "unsupported_grant_type", "Unsupported grant_type"),
    grant_not_allowed={
        "password": (400, "unauthorized_client", "Client not allowed for direct access grants"),
        "client_credentials": (
            401,
            "unauthorized_client",
            "Client not enabled to retrieve service account",
        ),
    },
    public_client_credentials_first=True,
    public_client_credentials=(
        401,
        "unauthorized_client",
        "Public client not allowed to retrieve service account",
    ),
    code_missing=(400, "invalid_request", "Missing parameter: code"),
    code_invalid=(400, "invalid_grant", "Code not valid"),
    code_other_client=(
        400,
        "invalid_grant",
        "Auth error: Found different client_id in clientSession",
    ),
    redirect_mismatch=(400, "invalid_grant", "Incorrect redirect_uri"),
    pkce_missing=(400, "invalid_grant", "PKCE code verifier not specified"),
    pkce_mismatch=(400, "invalid_grant", "PKCE verification failed: Code mismatch"),
    refresh_missing=(400, "invalid_request", "No refresh token"),
    refresh_invalid=(400, "invalid_grant", "Invalid refresh token"),
    refresh_reused=(400, "invalid_grant", "Maximum allowed refresh token reuse exceeded"),
    reuse_ends_session=True,
    user_credentials=(400, "invalid_grant", "Invalid user credentials"),
    offline_ended=(400, "invalid_grant", "Offline user session not found"),
    consent_required=(400, "invalid_client", "Client requires user consent"),
)


def _in_scope_claim(scope: Record) -> bool:
    return str(scope.get("attributes", {}).get("include.in.token.scope", "true")) != "false"


def _user_claims(names: list[str], subject: Subject, user: Record) -> dict[str, Any]:
    claims: dict[str, Any] = {}
    if "email" in names:
        claims["email_verified"] = bool(user.get("emailVerified", False))
    if "profile" in names:
        if subject.name:
            claims["name"] = subject.name
        claims["preferred_username"] = subject.username
        for claim, field in (("given_name", "firstName"), ("family_name", "lastName")):
            if user.get(field):
                claims[claim] = user[field]
    if "email" in names and subject.email:
        claims["email"] = subject.email
    return claims


def _mapper_claims(applied: list[Record], subject: Subject) -> dict[str, Any]:
    """Claims of the audience and group-membership mappers of the applied scopes."""
    claims: dict[str, Any] = {}
    audiences: list[str] = []
    for scope in applied:
        for mapper in scope.get("protocolMappers", []):
            config = mapper.get("config", {})
            if config.get("access.token.claim", "true") != "true":
                continue
            if mapper.get("protocolMapper") == "oidc-audience-mapper":
                value = config.get("included.client.audience") or config.get(
                    "included.custom.audience"
                )
                if value and value not in audiences:
                    audiences.append(value)
            elif mapper.get("protocolMapper") == "oidc-group-membership-mapper":
                full = config.get("full.path", "true") == "true"
                claims[config.get("claim.name", "groups")] = [
                    f"/{g}" if full else g for g in subject.groups
                ]
    if audiences:
        claims["aud"] = audiences[0] if len(audiences) == 1 else audiences
    return claims


def access_claims(
    client: OAuthClient,
    record: Record | None,
    subject: Subject,
    user: Record,
    applied: list[Record],
    requested: list[str],
) -> dict[str, Any]:
    """The access token's claims beyond iss, iat, exp and jti."""
    names = [s["name"] for s in applied]
    claims: dict[str, Any] = {"sub": subject.id}
    if "basic" in names and not subject.service_account:
        claims["auth_time"] = int(time.time())
    claims.update({"typ": "Bearer", "azp": client.client_id})
    if not subject.service_account:  # a client-credentials token belongs to no session
        claims["sid"] = new_id()
    if "acr" in names:  # level 1: signed in with a password
        claims["acr"] = "1"
    origins = web_origins(record) if "web-origins" in names else []
    if origins:
        claims["allowed-origins"] = origins
    in_claim = [s["name"] for s in applied if _in_scope_claim(s)]
    claims["scope"] = " ".join(["openid", *in_claim] if "openid" in requested else in_claim)
    claims.update(_user_claims(names, subject, user))
    claims.update(_mapper_claims(applied, subject))
    return claims


def id_claims(access: dict[str, Any], standard: dict[str, Any]) -> dict[str, Any]:
    """Keycloak's ID token: the standard claims, the session id, the user's claims the access
    token carries, and the `typ` claim `ID` (access tokens say `Bearer`), which is how a
    resource server tells them apart."""
    claims = {**standard, "typ": "ID", "jti": new_id()}
    for name in ("sid", "acr", "email_verified", "given_name", "family_name"):
        if name in access:
            claims[name] = access[name]
    return claims


def refresh_jwt(record: dict[str, Any], claims: dict[str, Any], key: OctKey) -> str:
    """A refresh token as Keycloak writes one: an HS512 JWT of the realm's HMAC key, `typ`
    `Refresh` (`Offline` with the offline_access scope, which has no `exp`)."""
    offline = "offline_access" in scope_tokens(str(claims.get("scope", "")))
    body = {"exp": record["exp"], "iat": claims["iat"], "jti": new_id(), "iss": claims["iss"]}
    body |= {"aud": claims["iss"], "sub": claims.get("sub"), "typ": "Refresh", "azp": claims["azp"]}
    body |= {"sid": claims.get("sid"), "scope": claims.get("scope", "")}
    if offline:
        body |= {"typ": "Offline"}
        del body["exp"]
    header = {"alg": "HS512", "typ": "JWT", "kid": key.kid}
    return jwt.encode(header, body, key, algorithms=["HS512"])


def response_members(
    not_before: Callable[[], int], refresh_tokens: dict[str, dict[str, Any]], key: OctKey
) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """Keycloak's own members of a token response: `scope` as the token's claim says it,
    `not-before-policy` (the realm's `notBefore`), for a user's session `session_state` (the
    session id), and the refresh token as a JWT (the dev IdP keeps its record under it)."""

    def add(answer: dict[str, Any], claims: dict[str, Any]) -> None:
        answer["scope"] = claims.get("scope", answer["scope"])  # the applied scopes
        answer["not-before-policy"] = not_before()
        if "sid" in claims:
            answer["session_state"] = claims["sid"]
        if "refresh_token" in answer:
            record = refresh_tokens.pop(answer["refresh_token"])
            answer["refresh_token"] = refresh_jwt(record, claims, key)
            refresh_tokens[answer["refresh_token"]] = record
            if "offline_access" in scope_tokens(answer["scope"]):  # an offline session: no end
                record["offline"] = True
                answer["refresh_expires_in"] = 0

    return add
