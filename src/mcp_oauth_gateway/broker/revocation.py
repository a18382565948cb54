"""Token revocation (RFC 7009) at the gateway, for the tokens the Broker handed out.

A token can be revoked only by the client it was issued to: gateway refresh tokens carry their
client, and access tokens are bound to theirs (by SHA-256 digest) when they are handed over. The
gateway's refresh token is revoked here, whatever the provider says; the provider's token it
stood for (or the access token) is then revoked at the provider's `revocation_endpoint`, and the
provider's refusal, if any, is passed on. Unknown tokens are answered 200, as RFC 7009 §2.2 says
(a client learns nothing from revoking a token that is not its own or no longer exists)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from ..audit import identity
from ..urls import shown_url
from .errors import OAuthError
from .refresh import RefreshTokens, digest, user_of
from .store import BrokerStore

log = logging.getLogger("mcp_oauth_gateway.broker")

UPSTREAM_TIMEOUT = 15.0
MAX_ACCESS_TTL = 86400
HINTS = ("access_token", "refresh_token")


@dataclass(frozen=True, slots=True)
class Revoked:
    """What a revocation leaves to do at the provider, and whose sign-in it ended."""

    token: str  # the provider's token to revoke there
    kind: str  # its RFC 7009 token type
    idp: int  # the provider (providers[] index)
    user: dict[str, str] | None  # `iss` and `sub`, when known


class Revocation:
    """Access-token bindings and the revocation of both kinds of token."""

    def __init__(self, store: BrokerStore, refresh: RefreshTokens):
        self.store = store
        self.refresh = refresh

    async def bind(self, client_id: str, tokens: dict[str, Any], idp: int = 0) -> None:
        """Remember which client holds the access token in `tokens` (and which provider issued
        it), for as long as it lives."""
        access = tokens.get("access_token")
        expires_in = tokens.get("expires_in")
        ttl = expires_in if isinstance(expires_in, int) and expires_in > 0 else 3600
        if isinstance(access, str):
            ttl = min(ttl, MAX_ACCESS_TTL)
            record = {"client_id": client_id, "expires_at": time.time() + ttl, "idp": idp}
            await self.store.put("access", digest(access), record, ttl)

    async def revoke(self, client_id: str, token: str, hint: str | None) -> Revoked | None:
        """Revoke `token` for `client_id` at the gateway; what to revoke at which provider,
        or None when nothing is left to do there."""
        if hint is not None and hint not in HINTS:
            raise OAuthError(
                400,
                "unsupported_token_type",
                f"token_type_hint {hint[:40]!r} is not one of {', '.join(HINTS)}",
            )
        order = ("access", "refresh") if hint == "access_token" else ("refresh", "access")
        for kind in order:
            record = await self.store.take(kind, digest(token))
            if record is None:
                continue
            if not hmac.compare_digest(record["client_id"], client_id):
                ttl = int(record.get("expires_at", time.time() + 60) - time.time())
                await self.store.put(kind, digest(token), record, max(ttl, 1))
                raise OAuthError(400, "invalid_request", "the token was issued to another client")
            idp = int(record.get("idp", 0))
            if kind == "access":
                return Revoked(token, "access_token", idp, identity({"access_token": token}))
            await self.refresh.revoke_family(record["family"])
            return Revoked(record["provider"], "refresh_token", idp, user_of(record))
        if hint != "access_token":
            await self._revoke_rotated(client_id, token)
        return None

    async def _revoke_rotated(self, client_id: str, token: str) -> None:
        """A refresh token rotated away (or being rotated by a request in flight) ends its
        sign-in too: its family's current token is revoked. The marker stays, so the token
        presented at the token endpoint is still reported as reused."""
        key = digest(token)
        rotated = await self.store.take("refresh-rotated", key)
        if rotated is None:
            return
        ttl = max(1, int(rotated.get("expires_at", time.time() + 60) - time.time()))
        await self.store.put("refresh-rotated", key, rotated, ttl)
        holder = rotated.get("client_id")
        if isinstance(holder, str) and not hmac.compare_digest(holder, client_id):
            raise OAuthError(400, "invalid_request", "the token was issued to another client")
        await self.refresh.revoke_family(rotated["family"])


async def revoke_at_provider(
    session: aiohttp.ClientSession | None,
    endpoint: object,
    client_id: str,
    token: str,
    kind: str,
) -> None:
    """POST the revocation to the provider; raise OAuthError with its refusal."""
    if not isinstance(endpoint, str) or session is None:
        if kind == "refresh_token":
            return  # revoked at the gateway: nothing presents it to the provider any more
        raise OAuthError(
            400,
            "unsupported_token_type",
            "the identity provider has no revocation_endpoint, so an access token cannot be "
            "revoked before it expires",
        )
    form = {"token": token, "token_type_hint": kind, "client_id": client_id}
    try:
        async with asyncio.timeout(UPSTREAM_TIMEOUT):
            async with session.post(endpoint, data=form, allow_redirects=False) as response:
                if response.status == 200:
                    return
                body = await response.read()
    except (TimeoutError, aiohttp.ClientError) as exc:
        log.warning("provider revocation endpoint %s unreachable: %s", shown_url(endpoint), exc)
        raise OAuthError(
            503,
            "temporarily_unavailable",
            "the identity provider's revocation endpoint did not answer; try again",
        ) from exc
    raise _refusal(response.status, body)


def _refusal(status: int, body: bytes) -> OAuthError:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    description = parsed.get("error_description") if isinstance(parsed, dict) else None
    return OAuthError(
        status if 400 <= status < 500 else 502,
        error if isinstance(error, str) else "server_error",
        f"the identity provider refused the revocation: "
        f"{description if isinstance(description, str) else f'HTTP {status}'}",
    )
