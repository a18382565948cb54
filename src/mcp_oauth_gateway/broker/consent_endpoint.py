"""The consent page's answer (a POST to the authorization endpoint): the user allowed the client,
at one provider, or denied it. An allowed request is remembered in the route's consent cookie
unless its redirect URI could be received by another program on the device (`consent`)."""

from __future__ import annotations

import hmac
from dataclasses import replace

from .. import audit
from ..asgi import Headers, Receive, Scope, Send, request_origin
from . import consent
from .context import BrokerContext
from .errors import OAuthError
from .requests import cookies, read_form
from .state import PendingAuthorization
from .upstream import to_provider

CONSENT_DAYS = 30


async def answer(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """Remember an allowed client and go on to the provider; a denial goes back to the client."""
    # Checked before anything is read or consumed: another site's form must not be able to
    # answer (or use up) a pending sign-in.
    audit.event(scope, "consent-answer")
    foreign = consent.cross_origin(scope)
    if foreign is not None:
        raise OAuthError(403, "access_denied", foreign)
    form = await read_form(receive)
    pending = await ctx.state.take_pending(form.get("request", ""))
    if pending is None:
        raise OAuthError(
            400,
            "invalid_request",
            "unknown, expired or already answered authorization request; start the sign-in again",
        )
    audit.client(scope, pending.client_id)
    consent_name, browser_name, secure = consent.cookie_names(request_origin(scope), ctx.route)
    jar = cookies(scope)
    if not hmac.compare_digest(jar.get(browser_name, ""), pending.browser):
        raise OAuthError(
            400,
            "invalid_request",
            "this consent was not given in the browser that started the sign-in; start again",
        )
    pending = _decision(ctx, scope, form.get("decision", ""), pending)
    assert pending.provider is not None  # a decision that allows names its provider
    headers: Headers = []
    if consent.unattended_by(pending.redirect_href) is None:
        secret = await ctx.store.secret()
        digests = consent.read_consent(secret, jar.get(consent_name))
        digest = remembered_as(ctx, pending)
        # The most recent last: a cookie full of requests forgets the oldest first.
        digests = [d for d in digests if d != digest] + [digest]
        cookie = (
            f"{consent_name}={consent.write_consent(secret, digests)}; Path=/; "
            f"HttpOnly; SameSite=Lax; Max-Age={CONSENT_DAYS * 86400}{secure}"
        )
        headers.append((b"set-cookie", cookie.encode()))
    provider = ctx.providers[pending.provider].name
    why = f"the user allowed the client; sign-in started at provider {provider}"
    audit.event(scope, "consent-given", detail=why)
    await to_provider(ctx, scope, send, pending, headers)


def remembered_as(ctx: BrokerContext, pending: PendingAuthorization) -> str:
    """What the route's consent cookie records of this request once it is allowed."""
    assert pending.provider is not None  # chosen by now
    return consent.consent_digest(
        ctx.route,
        ctx.signin(pending.provider).identity,
        pending.client_id,
        pending.redirect_href,
        pending.scope,
    )


def _decision(
    ctx: BrokerContext, scope: Scope, decision: str, pending: PendingAuthorization
) -> PendingAuthorization:
    """The pending request with the provider the user allowed it at: `allow` when there
    was no choice, `allow-<index>` when there was one; anything else is a denial."""
    chosen = pending.provider
    if chosen is None and decision.startswith("allow-") and decision[6:].isdigit():
        index = int(decision[6:])
        if index < len(ctx.providers):
            return replace(pending, provider=index)
    if chosen is not None and decision in ("allow", f"allow-{chosen}"):
        return pending
    if decision.startswith("allow"):
        raise OAuthError(
            400,
            "invalid_request",
            "choose the identity provider to sign in with; start the sign-in again",
        )
    audit.event(scope, "consent-refused")
    raise OAuthError(
        400,
        "access_denied",
        "the user denied the request",
        redirect_href=pending.redirect_href,
        state=pending.state,
    )
