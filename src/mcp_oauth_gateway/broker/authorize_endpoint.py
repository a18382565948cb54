"""The Broker's authorization endpoint: a client's request checked (exact redirect URI, PKCE
S256, scope, resource), then the consent page, or straight on to the provider when this browser
already allowed exactly this request at this route (`consent`: never for a redirect URI that
another program on the device could receive). The consent page posts back here
(`consent_endpoint`)."""

from __future__ import annotations

import re
import secrets

from .. import audit
from ..asgi import Receive, Scope, Send, request_origin
from ..oauth_scopes import scope_tokens
from ..urls import InvalidUri, navigable, parse_redirect_uri, redirect_matches
from . import consent, pages
from .clients import BrokerClient
from .consent_endpoint import answer, remembered_as
from .context import BrokerContext
from .errors import OAuthError, method_not_allowed
from .identity import pick_by_hint
from .requests import cookies, query_params, scope_param
from .state import PENDING_TTL, PendingAuthorization
from .upstream import to_provider

# RFC 9449 §10: base64url (no padding) of a SHA-256 digest, so 43 characters whose last
# carries 4 bits of the digest and two zero bits.
_JKT = re.compile(r"[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]")


async def authorize(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """GET: validate and ask for consent; POST: the consent decision."""
    if scope["method"] == "POST":
        await answer(ctx, scope, receive, send)
        return
    if scope["method"] not in ("GET", "HEAD"):
        raise method_not_allowed("GET, POST")
    audit.event(scope, "authorization-request")
    client, pending = await _authorization_request(ctx, scope)
    _, browser_name, secure = consent.cookie_names(request_origin(scope), ctx.route)
    unattended = consent.unattended_by(pending.redirect_href)
    if unattended is None and await _remembered(ctx, scope, pending):
        assert pending.provider is not None  # remembered consent names its provider
        provider = ctx.providers[pending.provider].name
        why = f"consent remembered in this browser; sign-in started at provider {provider}"
        audit.event(scope, "signin-started", detail=why)
        await to_provider(ctx, scope, send, pending)
        return
    request_id = secrets.token_urlsafe(24)
    await ctx.state.put_pending(request_id, pending)
    never = "" if unattended is None else f" (never remembered for {unattended})"
    audit.event(scope, "consent-asked", detail=f"consent asked for scope {pending.scope!r}{never}")
    cookie = (
        f"{browser_name}={pending.browser}; Path=/; HttpOnly; SameSite=Lax; "
        f"Max-Age={PENDING_TTL}{secure}"
    )
    choices = (
        [ctx.providers[pending.provider]] if pending.provider is not None else list(ctx.providers)
    )
    await pages.send_consent(
        send,
        action=ctx.authorize_path,
        request_id=request_id,
        client=client,
        redirect_href=pending.redirect_href,
        scopes=scope_tokens(pending.scope),
        cookie=cookie,
        provider_authorize=[await _authorize_endpoint(ctx, p.index) for p in choices],
        choices=[(p.index, p.name) for p in choices] if len(ctx.providers) > 1 else [],
        resource=pending.resource,
    )


async def _remembered(ctx: BrokerContext, scope: Scope, pending: PendingAuthorization) -> bool:
    """Whether this browser allowed exactly this request at this route before."""
    if pending.provider is None:
        return False  # the user has yet to choose the provider
    consent_name, _, _ = consent.cookie_names(request_origin(scope), ctx.route)
    listed = consent.read_consent(await ctx.store.secret(), cookies(scope).get(consent_name))
    return remembered_as(ctx, pending) in listed


async def _authorize_endpoint(ctx: BrokerContext, index: int) -> str | None:
    try:
        return navigable((await ctx.provider(index)).get("authorization_endpoint"))
    except OAuthError:
        return None  # the consent page still works; only its CSP is narrower


async def _authorization_request(
    ctx: BrokerContext, scope: Scope
) -> tuple[BrokerClient, PendingAuthorization]:
    """The client and its checked request. Until the redirect URI is known to be the
    client's, errors are answered in place: a redirect to an unchecked URI is how codes and
    errors leak."""
    params = query_params(scope)
    audit.client(scope, params.get("client_id", ""))
    client = await ctx.client(params.get("client_id", ""))
    try:
        requested = parse_redirect_uri(params.get("redirect_uri", ""))
    except InvalidUri as exc:
        raise OAuthError(400, "invalid_request", str(exc)) from exc
    if not redirect_matches(client.redirect_uris, requested):
        raise OAuthError(
            400,
            "invalid_request",
            f"redirect_uri {requested.href!r} is not registered for this "
            f"client (registered: {list(client.redirect_uris)})",
        )
    state = params.get("state")
    if params.get("response_type") != "code":
        raise OAuthError(
            400,
            "unsupported_response_type",
            "only response_type=code is supported",
            redirect_href=requested.href,
            state=state,
        )
    challenge = params.get("code_challenge", "")
    if params.get("code_challenge_method") != "S256" or not 43 <= len(challenge) <= 128:
        raise OAuthError(
            400,
            "invalid_request",
            "PKCE is required: code_challenge with code_challenge_method=S256",
            redirect_href=requested.href,
            state=state,
        )
    _, browser_name, _ = consent.cookie_names(request_origin(scope), ctx.route)
    return client, PendingAuthorization(
        client_id=client.client_id,
        client_name=client.name,
        redirect_uri=params["redirect_uri"],
        redirect_href=requested.href,
        state=state,
        challenge=challenge,
        scope=scope_param(params.get("scope"), ctx.scopes, requested.href, state),
        resource=ctx.target(scope, params.get("resource"), requested.href, state),
        browser=cookies(scope).get(browser_name) or secrets.token_urlsafe(24),
        provider=pick_by_hint(ctx.providers, params.get("login_hint")),
        login_hint=params.get("login_hint"),
        dpop_jkt=_dpop_jkt(ctx, params.get("dpop_jkt"), requested.href, state),
    )


def _dpop_jkt(
    ctx: BrokerContext, given: str | None, redirect_href: str, state: str | None
) -> str | None:
    """The DPoP key thumbprint the code is to be bound to (RFC 9449 §10), checked."""
    if given is None:
        return None
    if not _JKT.fullmatch(given):
        raise OAuthError(
            400,
            "invalid_request",
            f"dpop_jkt {given[:60]!r} is not a key thumbprint: it must be the base64url "
            "SHA-256 thumbprint (RFC 7638) of the client's DPoP public key, 43 characters",
            redirect_href=redirect_href,
            state=state,
        )
    if not any(provider.dpop.enabled for provider in ctx.providers):
        raise OAuthError(
            400,
            "invalid_request",
            "this MCP server issues no DPoP-bound tokens (dpop: Disabled); leave dpop_jkt out",
            redirect_href=redirect_href,
            state=state,
        )
    return given
