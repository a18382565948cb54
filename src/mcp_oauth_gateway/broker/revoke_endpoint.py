"""The Broker's revocation endpoint (RFC 7009): a token the client holds revoked at the gateway,
then what it stood for at the provider (`revocation` says how). A DPoP-bound access token is
the provider's token it holds (`bound_tokens`); one that does not open here is unknown."""

from __future__ import annotations

from .. import audit
from ..asgi import Receive, Scope, Send, send_json
from .bound_tokens import provider_token
from .context import BrokerContext
from .errors import OAuthError, method_not_allowed
from .requests import read_form
from .revocation import revoke_at_provider


async def revoke(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """RFC 7009: revoke a token this client holds, here and at the provider."""
    if scope["method"] != "POST":
        raise method_not_allowed("POST")
    form = await read_form(receive)
    client_id = form.get("client_id", "")
    audit.event(scope, "revocation-request", client_id)
    if not client_id:
        raise OAuthError(
            400,
            "invalid_client",
            "client_id is required: a token can only be revoked by the client it was issued to",
        )
    await ctx.client(client_id)
    token = form.get("token")
    if not token:
        raise OAuthError(400, "invalid_request", "token is required")
    # A sealed token that does not open here was never stored here either: nothing is found.
    held = await provider_token(ctx, token) or token
    upstream = await ctx.revocation.revoke(client_id, held, form.get("token_type_hint"))
    what = "unknown or expired token (nothing to revoke)" if upstream is None else upstream.kind
    audit.event(scope, "token-revoked", detail=f"revoked: {what}")
    if upstream is not None:
        audit.acting_user(scope, upstream.user)
        provider = await ctx.provider(upstream.idp)
        await revoke_at_provider(
            ctx.session(),
            provider.get("revocation_endpoint"),
            ctx.signin(upstream.idp).client_id,
            upstream.token,
            upstream.kind,
        )
    await send_json(send, 200, {}, [(b"pragma", b"no-cache")])
