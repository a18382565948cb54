"""The OpenID side's HTTP plumbing: form bodies, JSON and token responses, and the token
endpoint's refusals, worded as each provider words them (`TokenErrors`: the defaults are the
dev IdP's own wording, authentik's where it is known; the Keycloak flavour passes Keycloak
26.7's, probed on the real server)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

# (HTTP status, `error`, `error_description`)
Refusal = tuple[int, str, str]

_RFC_INVALID_GRANT = (
    400,
    "invalid_grant",
    "The provided authorization grant or refresh token is invalid, expired, revoked, does not "
    "match the redirection URI used in the authorization request, or was issued to another "
    "client",
)


class OAuthError(Exception):
    """An RFC 6749 error response."""

    def __init__(self, status: int, error: str, description: str):
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description

    @classmethod
    def of(cls, refusal: Refusal, **values: str) -> OAuthError:
        """The error of a refusal (`{grant}` and such filled in)."""
        status, error, description = refusal
        return cls(status, error, description.format(**values))


@dataclass(frozen=True)
class TokenErrors:
    """How a provider refuses a token request, case by case."""

    unknown_client: Refusal = (
        401,
        "invalid_client",
        "Invalid client or Invalid client credentials",
    )
    bad_secret: Refusal = (401, "invalid_client", "Invalid client credentials")
    no_secret: Refusal = (401, "invalid_client", "client authentication required")
    missing_grant: Refusal = (400, "unsupported_grant_type", "grant_type '' is not supported")
    unsupported_grant: Refusal = (
        400,
        "unsupported_grant_type",
        "grant_type {grant!r} is not supported",
    )
    # By grant; a grant not named here gets the flavour's `grant_not_allowed_error`.
    grant_not_allowed: dict[str, Refusal] = field(default_factory=dict)
    # Keycloak refuses client credentials to a public client before it looks at its grants.
    public_client_credentials_first: bool = False
    public_client_credentials: Refusal = (
        401,
        "unauthorized_client",
        "public clients cannot use client_credentials",
    )
    code_missing: Refusal = _RFC_INVALID_GRANT
    code_invalid: Refusal = _RFC_INVALID_GRANT
    code_other_client: Refusal = _RFC_INVALID_GRANT
    redirect_mismatch: Refusal = _RFC_INVALID_GRANT
    pkce_missing: Refusal = (400, "invalid_grant", "PKCE verification failed")
    pkce_mismatch: Refusal = (400, "invalid_grant", "PKCE verification failed")
    refresh_missing: Refusal = (400, "invalid_grant", "Token is not active")
    refresh_invalid: Refusal = (400, "invalid_grant", "Token is not active")
    session_ended: Refusal = (400, "invalid_grant", "Session not active")
    offline_ended: Refusal = (400, "invalid_grant", "Session not active")
    # A refresh token used a second time where each is good once; Keycloak then ends the
    # client's part of the session, and its other refresh tokens get `client_session_ended`.
    refresh_reused: Refusal = (400, "invalid_grant", "Token is not active")
    reuse_ends_session: bool = False
    client_session_ended: Refusal = (400, "invalid_grant", "Session doesn't have required client")
    user_credentials: Refusal = (401, "invalid_grant", "Invalid user credentials")
    # A password grant for a client that asks its users' consent (None: allowed).
    consent_required: Refusal | None = None


async def read_form(request: Request) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body as a dict (the last value of a key wins)."""
    body = await request.body()
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def form_pairs(body: bytes) -> list[tuple[str, str]]:
    """Every parameter of a form body, repeats kept (`audience` may repeat in token exchange)."""
    return parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)


def json_response(
    payload: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """A JSON response rendered with orjson (both providers' renderers)."""
    return Response(
        orjson.dumps(payload), status_code=status, headers=headers, media_type="application/json"
    )


def token_response(payload: dict[str, object], status: int = 200) -> JSONResponse:
    """A token-endpoint JSON response (never cached)."""
    return JSONResponse(
        payload, status_code=status, headers={"Cache-Control": "no-store", "Pragma": "no-cache"}
    )


def oauth_error(exc: OAuthError) -> JSONResponse:
    """The JSON form of an OAuth error."""
    return token_response({"error": exc.error, "error_description": exc.description}, exc.status)


def append_query(uri: str, query: dict[str, str]) -> str:
    """`uri` with `query` added to its own query string."""
    return uri + ("&" if urlsplit(uri).query else "?") + urlencode(query)


class _Redirecting(Protocol):
    @property
    def redirect_uris(self) -> tuple[tuple[str, str], ...]:
        """(matching mode, value) pairs."""
        ...


def redirect_allowed(client: _Redirecting, uri: str) -> bool:
    """Whether `uri` is a registered redirect URI of `client` (strict, regex or wildcard)."""
    for mode, value in client.redirect_uris:
        if mode == "strict" and uri == value:
            return True
        if mode == "regex":
            try:
                if re.fullmatch(value, uri):
                    return True
            except re.error:
                continue
        if mode == "wildcard" and value.endswith("*") and uri.startswith(value[:-1]):
            return True
    return False


def standard_id_claims(client_id: str, access: dict[str, Any], now: int) -> dict[str, Any]:
    """The OpenID Connect ID-token claims for an access token's subject (Core §2)."""
    claims = {
        "iss": access["iss"],
        "sub": access.get("sub"),
        "aud": client_id,
        "iat": now,
        "exp": access["exp"],
        "auth_time": now,
        "azp": client_id,
    }
    for name in ("email", "groups", "preferred_username", "name"):
        if name in access:
            claims[name] = access[name]
    return claims
