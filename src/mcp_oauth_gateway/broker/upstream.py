"""The gateway as the provider's client: the browser sent to the provider's authorization
endpoint (as `mcp.clientId`, with the gateway's own PKCE and state), and the gateway's own calls
to its token endpoint (code exchange and refresh)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

from .. import pkce
from ..asgi import Headers, Scope, Send, request_origin
from ..controlplane.fetch import failure_text
from ..urls import navigable, shown_url, with_query
from .context import BrokerContext
from .errors import OAuthError
from .pages import send_redirect
from .state import PendingAuthorization, UpstreamRequest

log = logging.getLogger("mcp_oauth_gateway.broker")

UPSTREAM_TIMEOUT = 15.0


async def to_provider(
    ctx: BrokerContext,
    scope: Scope,
    send: Send,
    pending: PendingAuthorization,
    headers: Headers | None = None,
) -> None:
    """Send the browser to sign in at the provider the pending request names."""
    assert pending.provider is not None  # chosen by now: the only one, a hint or the user
    signin = ctx.signin(pending.provider)
    endpoint = navigable((await ctx.provider(signin.index)).get("authorization_endpoint"))
    if endpoint is None:
        raise OAuthError(
            502,
            "server_error",
            "the identity provider's metadata has no "
            "usable authorization_endpoint (an http or https URL)",
        )
    upstream_state = secrets.token_urlsafe(32)
    upstream = UpstreamRequest(
        pending,
        pkce.new_verifier(),
        request_origin(scope) + ctx.callback_path,
        signin.index,
    )
    await ctx.state.put_upstream(upstream_state, upstream)
    params = {
        "response_type": "code",
        "client_id": signin.client_id,
        "redirect_uri": upstream.callback,
        "scope": pending.scope,
        "state": upstream_state,
        "code_challenge": pkce.s256(upstream.verifier),
        "code_challenge_method": "S256",
    }
    if pending.resource and signin.forwards_resource:
        params["resource"] = pending.resource
    if pending.login_hint:
        params["login_hint"] = pending.login_hint
    await send_redirect(send, with_query(endpoint, urlencode(params)), headers)


async def post_token(
    ctx: BrokerContext, index: int, provider: dict[str, Any], form: dict[str, str]
) -> tuple[int, Any]:
    """POST `form` to the provider's token endpoint as the gateway's client: (status, parsed
    JSON), or (502, None) when there is no endpoint, no answer or no JSON."""
    endpoint = provider.get("token_endpoint")
    session = ctx.session()
    if not isinstance(endpoint, str) or session is None:
        return 502, None
    try:
        async with asyncio.timeout(UPSTREAM_TIMEOUT):
            async with session.post(
                endpoint,
                data={"client_id": ctx.signin(index).client_id, **form},
                headers={"Accept": "application/json"},
            ) as response:
                body = await response.read()
                try:
                    return response.status, orjson.loads(body)
                except orjson.JSONDecodeError:
                    return 502, None
    except (TimeoutError, aiohttp.ClientError) as exc:
        why = failure_text(exc)
        log.warning("provider token endpoint %s unreachable: %s", shown_url(endpoint), why)
        return 502, None
