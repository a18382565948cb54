"""The Broker's DPoP-bound access tokens (RFC 9449 §5, §6): where a client proved a key at the
token endpoint, the provider's access token is handed over sealed to that key and the route
(`dpop.bound_tokens`), as `token_type: DPoP`. The route's JWT stage opens it (`RouteTokens`),
checks the provider's token inside as it checks any, and holds every call to the key; the
revocation endpoint opens it to find the provider's token it stands for.

This layer binds whatever the provider's tokens are: the gateway is the only resource server
the client's token is for, and the provider's token stays the gateway's, as its refresh tokens
do. (A provider that binds tokens itself, Keycloak say, binds those a client gets from it
directly: Facade mode. The gateway's own token requests to the provider carry no proof.)"""

from __future__ import annotations

from typing import Any

from ..asgi import Scope
from ..dpop import SEALED_PREFIX, BoundToken, SealError
from .context import BrokerContext

DPOP = "DPoP"


async def bound_answer(
    ctx: BrokerContext, tokens: dict[str, Any], idp: int, jkt: str
) -> dict[str, Any]:
    """The token response with its access token sealed to key `jkt` (the provider's token,
    issued by provider `idp`) and said to be DPoP-bound (§5: `token_type` DPoP)."""
    inner = tokens["access_token"]
    sealed = await ctx.seal.seal(ctx.route, BoundToken(inner, jkt, idp))
    return {**tokens, "access_token": sealed, "token_type": DPOP}


async def provider_token(ctx: BrokerContext, token: str) -> str | None:
    """The provider's token that a token a client holds stands for: a sealed one's content,
    the token itself otherwise; None for a sealed token that does not open at this route
    (another route's, another deployment's, or made up)."""
    if not token.startswith(SEALED_PREFIX):
        return token
    try:
        return (await ctx.seal.open(ctx.route, token)).token
    except SealError:
        return None


class RouteTokens:
    """What the route's JWT stage opens the route's sealed tokens with: the seal, at the route
    key of the request (`BrokerContext.route_for`)."""

    def __init__(self, context: BrokerContext):
        self.context = context

    async def open(self, scope: Scope, token: str) -> BoundToken:
        """What `token` holds, when this route sealed it; SealError otherwise."""
        context = self.context
        return await context.seal.open(context.route_for(scope), token)
