"""The provider's redirect back to the gateway: the sign-in's state and issuer checked, the
provider's code exchanged, and the client handed the gateway's own one-time code with `iss`
(RFC 9207)."""

from __future__ import annotations

import logging
import secrets
from typing import Any
from urllib.parse import urlencode

from .. import audit
from ..asgi import Receive, Scope, Send
from ..urls import with_query
from .context import BrokerContext
from .errors import OAuthError
from .pages import send_redirect
from .requests import query_params
from .state import IssuedCode, UpstreamRequest
from .upstream import post_token

log = logging.getLogger("mcp_oauth_gateway.broker")


async def callback(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """The provider's redirect: check state and iss, exchange, hand the client a code."""
    params = query_params(scope)
    audit.event(scope, "signin-callback")
    upstream = await ctx.state.take_upstream(params.get("state", ""))
    if upstream is None:
        raise OAuthError(
            400,
            "invalid_request",
            "unknown, expired or already used state; start the sign-in again",
        )
    provider = await ctx.provider(upstream.provider)
    _check_issuer(provider, params.get("iss"))
    pending = upstream.pending
    audit.client(scope, pending.client_id)
    signin = ctx.signin(upstream.provider).name
    if "error" in params:
        audit.event(scope, "signin-refused", detail=f"at provider {signin}")
        raise OAuthError(
            400,
            params["error"],
            params.get("error_description", "the provider refused"),
            redirect_href=pending.redirect_href,
            state=pending.state,
        )
    status, tokens = await post_token(
        ctx, upstream.provider, provider, _exchange_form(ctx, upstream, params.get("code", ""))
    )
    if status != 200 or not isinstance(tokens, dict) or "access_token" not in tokens:
        log.warning("provider code exchange failed: HTTP %s", status)
        audit.event(scope, "signin-failed")
        raise OAuthError(
            502,
            "server_error",
            "the identity provider refused the code exchange",
            redirect_href=pending.redirect_href,
            state=pending.state,
        )
    code = secrets.token_urlsafe(32)
    await ctx.state.put_code(
        code,
        IssuedCode(
            pending.client_id,
            pending.redirect_uri,
            pending.challenge,
            tokens,
            upstream.provider,
            pending.dpop_jkt,
        ),
    )
    why = f"signed in at provider {signin}; authorization code issued to the client"
    audit.event(scope, "code-issued", detail=why)
    audit.signed_in(scope, tokens)
    out = {"code": code, "iss": ctx.issuer(scope)}
    if pending.state is not None:
        out["state"] = pending.state
    await send_redirect(send, with_query(pending.redirect_href, urlencode(out)))


def _check_issuer(provider: dict[str, Any], iss: str | None) -> None:
    """Refuse a response whose `iss` is not the provider's, or that lacks the `iss` the
    provider says it sends."""
    expected_iss = provider.get("issuer")
    if (iss is not None and iss != expected_iss) or (
        iss is None and provider.get("authorization_response_iss_parameter_supported")
    ):
        raise OAuthError(
            400,
            "invalid_request",
            f"the authorization response iss {iss!r} "
            f"is not the provider issuer {expected_iss!r} (RFC 9207 mix-up "
            "defence)",
        )


def _exchange_form(ctx: BrokerContext, upstream: UpstreamRequest, code: str) -> dict[str, str]:
    """The provider's code exchange, `resource` included if the provider takes it."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": upstream.callback,
        "code_verifier": upstream.verifier,
    }
    if upstream.pending.resource and ctx.signin(upstream.provider).forwards_resource:
        form["resource"] = upstream.pending.resource
    return form
