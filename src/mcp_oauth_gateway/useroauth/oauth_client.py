"""The gateway as a user's OAuth client at an upstream authorization server: the authorization
request it sends the browser to (PKCE S256, `state`, RFC 8707 `resource`), the RFC 9207 check of
the response's `iss`, and its own calls to the token endpoint (code, refresh) and the revocation
endpoint (RFC 7009).

Every call sends `Accept: application/json` (GitHub answers form-encoded bodies otherwise),
authenticates as the server's metadata allows (`client_auth`), and reads an error answer into
`UpstreamOAuthError`, a 200 whose body holds `error` included (GitHub's way). Log lines name the
endpoint and the error code only: never a token, a code, a verifier or a secret."""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote_plus, urlencode

import aiohttp

from ..oauth_scopes import scope_problem
from ..urls import shown_url, with_query
from .metadata import AuthServer
from .transport import Reply, Unreachable, exchange

log = logging.getLogger("mcp_oauth_gateway.useroauth")

TOKEN_TIMEOUT = 15.0
_ACCEPT = {"Accept": "application/json"}
# Answers that say "try again later", not "this grant or client is wrong".
_TEMPORARY_ERRORS = frozenset({"temporarily_unavailable", "server_error"})


class UpstreamOAuthError(Exception):
    """The authorization server refused or failed a call: its OAuth `error` code (or the
    gateway's own: `temporarily_unavailable` for no answer, `server_error` for a 5xx without
    one, `invalid_response` for an answer that is neither tokens nor an OAuth error), its
    description, the HTTP status (None: no answer), and whether trying again later may
    succeed (no answer, 5xx, 429, `temporarily_unavailable`, `server_error`)."""

    def __init__(
        self,
        error: str,
        description: str,
        status: int | None,
        *,
        temporary: bool = False,
        endpoint: str = "",
    ):
        super().__init__(
            f"{shown_url(endpoint)}: {error}: {description}"
            if endpoint
            else f"{error}: {description}"
        )
        self.error = error
        self.description = description
        self.status = status
        self.temporary = temporary

    @property
    def invalid_grant(self) -> bool:
        """The grant is gone (revoked, expired, used): drop it and ask the user again."""
        return self.error == "invalid_grant"


class IssuerMismatch(UpstreamOAuthError):
    """An authorization response whose RFC 9207 `iss` is not the server's issuer (or missing
    where the server promised it): a mix-up attack, or a response from another server."""


@dataclass(frozen=True, slots=True)
class TokenAnswer:
    """A token endpoint's successful answer. A refresh answer without `refresh_token` means the
    server did not rotate it: the caller keeps the refresh token it already holds. `scope`
    None: the server granted what was asked (RFC 6749 §5.1). `token_type` is always "Bearer"
    (any other type is refused)."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    token_type: str
    expires_in: int | None
    scope: str | None


def authorization_url(
    server: AuthServer,
    client_id: str,
    redirect_uri: str,
    state: str,
    code_challenge: str,
    scopes: Sequence[str] | None,
    resource: str | None,
) -> str:
    """Where to send the user's browser: the authorization endpoint (its own query kept) with
    the code flow's parameters, PKCE S256, the scopes and the RFC 8707 resource when given."""
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
    }
    if scopes:
        params["scope"] = scope_text(scopes)
    if resource:
        params["resource"] = resource
    return with_query(server.authorization_endpoint, urlencode(params))


def scope_text(scopes: Sequence[str]) -> str:
    """The scope parameter for `scopes`; ValueError when one of them would be read as none or
    as several (empty, a space, a character outside RFC 6749 §3.3)."""
    for scope in scopes:
        problem = "an empty scope" if not scope else scope_problem(scope)
        if problem is None and " " in scope:
            problem = f"the scope {scope[:60]!r} holds a space: it would be read as several"
        if problem is not None:
            raise ValueError(f"userOAuth.scopes: {problem}")
    return " ".join(scopes)


def check_iss(server: AuthServer, iss: str | None) -> None:
    """RFC 9207 §2.4: an authorization response's `iss` must be the server's issuer, and may be
    missing only when the server does not say it sends one; IssuerMismatch otherwise."""
    if server.issuer is None:
        # Explicit endpoints without an issuer: nothing to compare with. The callback is the
        # backend's own, so a response from another server has no flow to land in.
        return
    if iss is None:
        if server.iss_parameter_supported:
            raise IssuerMismatch(
                "invalid_request",
                f"the authorization response has no iss, though {shown_url(server.issuer)} "
                "says it sends one (RFC 9207)",
                None,
            )
        return
    if iss != server.issuer:
        raise IssuerMismatch(
            "invalid_request",
            f"the authorization response's iss {shown_url(iss[:200])!r} is not the "
            f"authorization server's issuer {shown_url(server.issuer)!r} (RFC 9207)",
            None,
        )


def client_auth(
    server: AuthServer, client_id: str, client_secret: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """(form fields, headers) that authenticate the client: a public client's id in the form;
    a secret by HTTP Basic when the server lists client_secret_basic (or lists nothing:
    RFC 8414's default), else in the form when it lists client_secret_post. ValueError when
    it accepts neither."""
    if client_secret is None:
        return {"client_id": client_id}, {}
    methods = server.token_endpoint_auth_methods
    if "client_secret_basic" in methods:
        # RFC 6749 §2.3.1: both are form-urlencoded before they are joined and encoded.
        pair = f"{quote_plus(client_id)}:{quote_plus(client_secret)}".encode()
        return {}, {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
    if "client_secret_post" in methods:
        return {"client_id": client_id, "client_secret": client_secret}, {}
    raise ValueError(
        "the authorization server accepts neither client_secret_basic nor client_secret_post "
        f"(its token_endpoint_auth_methods_supported: {list(methods)[:10]!r}); use a public "
        "client (no userOAuth.clientSecret) if it allows one"
    )


async def exchange_code(
    session: aiohttp.ClientSession,
    server: AuthServer,
    client_id: str,
    client_secret: str | None,
    code: str,
    redirect_uri: str,
    verifier: str,
    resource: str | None,
    *,
    limit: float = TOKEN_TIMEOUT,
) -> TokenAnswer:
    """Redeem an authorization code (with its PKCE verifier) for tokens."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
    }
    if resource:
        form["resource"] = resource
    return await _token_request(session, server, client_id, client_secret, form, limit)


async def refresh(
    session: aiohttp.ClientSession,
    server: AuthServer,
    client_id: str,
    client_secret: str | None,
    refresh_token: str,
    resource: str | None,
    scopes: Sequence[str] | None,
    *,
    limit: float = TOKEN_TIMEOUT,
) -> TokenAnswer:
    """New tokens for a refresh token; `invalid_grant` when the grant is gone."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    if scopes:
        form["scope"] = scope_text(scopes)
    if resource:
        form["resource"] = resource
    return await _token_request(session, server, client_id, client_secret, form, limit)


async def revoke(
    session: aiohttp.ClientSession,
    server: AuthServer,
    client_id: str,
    client_secret: str | None,
    token: str,
    hint: str | None,
    *,
    limit: float = TOKEN_TIMEOUT,
) -> bool:
    """Revoke a token at the server (RFC 7009); False when it has no revocation endpoint."""
    endpoint = server.revocation_endpoint
    if endpoint is None:
        return False
    form = {"token": token}
    if hint:
        form["token_type_hint"] = hint
    reply = await _post(session, server, endpoint, client_id, client_secret, form, limit)
    if not 200 <= reply.status < 300:  # RFC 7009 says 200; some servers answer 204
        raise refusal(endpoint, reply)
    return True


async def _token_request(
    session: aiohttp.ClientSession,
    server: AuthServer,
    client_id: str,
    client_secret: str | None,
    form: dict[str, str],
    limit: float,
) -> TokenAnswer:
    endpoint = server.token_endpoint
    reply = await _post(session, server, endpoint, client_id, client_secret, form, limit)
    return token_answer(endpoint, reply)


def token_answer(endpoint: str, reply: Reply) -> TokenAnswer:
    """The tokens of a token endpoint's reply, or UpstreamOAuthError: an error status, a body
    that is not a JSON object, a 200 whose body holds `error` (GitHub's way of refusing), or an
    answer `read_token_answer` refuses."""
    document = reply.json_object()
    if reply.status != 200 or document is None or "error" in document:
        raise refusal(endpoint, reply)
    try:
        return read_token_answer(document)
    except ValueError as exc:
        log.warning("user OAuth: %s answered an unusable token answer", shown_url(endpoint))
        raise UpstreamOAuthError("invalid_response", str(exc), 200, endpoint=endpoint) from exc


async def _post(
    session: aiohttp.ClientSession,
    server: AuthServer,
    endpoint: str,
    client_id: str,
    client_secret: str | None,
    form: dict[str, str],
    limit: float,
) -> Reply:
    try:
        auth_form, auth_headers = client_auth(server, client_id, client_secret)
    except ValueError as exc:
        raise UpstreamOAuthError("invalid_client", str(exc), None, endpoint=endpoint) from exc
    try:
        return await exchange(
            session,
            "POST",
            endpoint,
            headers={**_ACCEPT, **auth_headers},
            form={**form, **auth_form},
            limit=limit,
        )
    except Unreachable as exc:
        log.warning("user OAuth: %s unreachable: %s", shown_url(endpoint), exc)
        raise UpstreamOAuthError(
            "temporarily_unavailable",
            f"no answer: {exc}",
            None,
            temporary=True,
            endpoint=endpoint,
        ) from exc


def read_token_answer(document: dict[str, object]) -> TokenAnswer:
    """The tokens of a successful answer (RFC 6749 §5.1); ValueError when it has no access
    token, a token type other than Bearer, or fields of the wrong type."""
    access = document.get("access_token")
    if not isinstance(access, str) or not access:
        raise ValueError("the token answer has no access_token")
    token_type = document.get("token_type")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":
        # DPoP or MAC tokens need proof the gateway does not send: never use one as a bearer.
        shown = repr(token_type[:40]) if isinstance(token_type, str) else "missing"
        raise ValueError(f"the token answer's token_type is {shown}, not Bearer")
    refresh_token = document.get("refresh_token")
    if refresh_token is not None and not isinstance(refresh_token, str):
        raise ValueError("the token answer's refresh_token is not a string")
    scope = document.get("scope")
    if scope is not None and not isinstance(scope, str):
        raise ValueError("the token answer's scope is not a string")
    return TokenAnswer(
        access_token=access,
        refresh_token=refresh_token or None,
        token_type="Bearer",
        expires_in=_expires_in(document.get("expires_in")),
        scope=scope,
    )


def _expires_in(value: object) -> int | None:
    """Seconds the access token lives: a non-negative integer (some servers write it as a
    string of digits); ValueError for anything else but absent."""
    if value is None:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise ValueError("the token answer's expires_in is not a number of seconds")


def refusal(endpoint: str, reply: Reply) -> UpstreamOAuthError:
    """An error answer as UpstreamOAuthError (its code logged with the endpoint, nothing else)."""
    document = reply.json_object() or {}
    code, description = document.get("error"), document.get("error_description")
    if isinstance(code, str) and code:
        error = code[:100]
        text = description[:300] if isinstance(description, str) else "no description"
    elif reply.status >= 500:
        error, text = "server_error", reply.described()
    else:
        error, text = "invalid_response", reply.described()
    temporary = reply.status >= 500 or reply.status == 429 or error in _TEMPORARY_ERRORS
    log.warning("user OAuth: %s answered HTTP %d %s", shown_url(endpoint), reply.status, error)
    return UpstreamOAuthError(error, text, reply.status, temporary=temporary, endpoint=endpoint)
